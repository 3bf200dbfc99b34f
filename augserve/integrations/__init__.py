"""Our scheduling inside other serving engines (layer 4).

- `options`: the plugin's knobs (`PluginOptions`), read from the outside engine's
  config or the environment.
- `plan`: how a client hands a request's planned segments to the plugin (for the
  oracle predictors) through the engine's per-request extra arguments.
- `bridge`: `PolicyBridge`, the engine-independent half: a mirror `Request` per
  engine request, our ranking policy and predictor, tool-call sessions, the dynamic
  token budget. It imports no outside engine and is tested without one.
- `predictions`: what the plugin predicts (the online predictor by default) and
  what it learns from the engine's turns.
- `affinity`: a session's data-parallel rank (every turn on the rank with its KV).
- `vllm`: `AugServeScheduler`, a vLLM v1 `scheduler_cls`, and `vllm_tools`:
  server-side tool calls over vLLM's `AsyncLLM` as resumable streaming sessions
  (the only modules that import vLLM; import them only where vLLM is installed).
"""
