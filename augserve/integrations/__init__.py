"""Our scheduling inside other serving engines (layer 4).

- `options`: the plugin's knobs (`PluginOptions`), read from the outside engine's
  config or the environment.
- `plan`: how a client hands a request's planned segments to the plugin (for the
  oracle predictors) through the engine's per-request extra arguments.
- `bridge`: `PolicyBridge`, the engine-independent half: a mirror `Request` per
  engine request, our ranking policy and predictor, tool-call sessions, the dynamic
  token budget. It imports no outside engine and is tested without one.
- `vllm`: `AugServeScheduler`, a vLLM v1 `scheduler_cls` (the only module that
  imports vLLM; import it only where vLLM is installed).
"""
