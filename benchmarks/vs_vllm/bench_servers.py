"""The servers bench_tools.py compares, each built from the run's settings (its
`args`, set by `bench_tools_protocol.apply_config`), and what each client sends.

- `vllm`: vLLM's OpenAI server with its default scheduler; calls on the client.
- `augserve:POLICY+PRED`: `augserve serve` on our engine; calls on the server.
- `augserve-vllm:POLICY+PRED`: `augserve serve --engine vllm` (our server over vLLM's
  AsyncLLM, our scheduler inside it); calls on the server.
- `vllm-plugin:POLICY+PRED`: vLLM's own OpenAI server with our scheduler class
  (`--scheduler-cls`, the plugin of docs/vllm-plugin.md); calls on the client, as
  for plain vLLM; with the online predictor the client sends no plan.

Every vLLM-side server gets the same flags (dtype, block size, KV blocks, batch
tokens, sequences, prefix caching, eager) and the same OpenMP binding; they differ
only in what the row's name says.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_plugin import CPU_ENV, VLLM_PY, prefill_time
from managed_server import ManagedServer, free_port
from session_loop import augserve_turn_extras, plain_turn_extras
from tool_workload import ToolRequest, decode_iteration_time, vllm_extras

from augserve.integrations.options import PluginOptions

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
AUGSERVE = ROOT / ".venv" / "bin" / "augserve"
PLUGIN = "augserve.integrations.vllm.AugServeScheduler"
MARKS = "augserve.bench.request_marks.RequestMarks"  # server-side request times
# each `settings.augserve_engine` (bench_tools_protocol.ENGINES): its rows' prefix
ROW_PREFIX = {"augserve": "augserve", "vllm": "augserve-vllm", "vllm-plugin": "vllm-plugin"}
Extras = Callable[[ToolRequest, int], dict[str, Any]]


def ensure_model(path: Path, preset: str) -> Path:
    if not (path / "config.json").is_file():
        cmd = [str(AUGSERVE), "make-model", "--arch", "llama", "--preset", preset, "--untied",
               "--out", str(path)]  # fmt: skip
        subprocess.run(cmd, check=True, timeout=600)
    return path


def _vllm_env(args: argparse.Namespace, ours: bool = True) -> dict[str, str]:
    env = {**os.environ, **{k: os.environ.get(k, v) for k, v in CPU_ENV.items()}}
    env["VLLM_CPU_OMP_THREADS_BIND"] = args.vllm_omp_threads_bind  # the config's, not the shell's
    if ours or args.measure == "server":  # plain vLLM imports only the marks middleware
        env["PYTHONPATH"] = str(ROOT)  # this checkout's augserve, in vLLM's venv
    return env


def vllm_argv(args: argparse.Namespace, port: int) -> list[str]:
    """vLLM's OpenAI server on the run's model with the run's engine settings."""
    return [
        str(VLLM_PY), "-m", "vllm.entrypoints.openai.api_server", "--model", args.model,
        "--served-model-name", "m", "--host", "127.0.0.1", "--port", str(port),
        "--dtype", "float32", "--max-model-len", "2048", "--enforce-eager",
        "--enable-prefix-caching", "--seed", "0", "--disable-uvicorn-access-log",
        "--enable-prompt-tokens-details",  # usage's cached_tokens: the agent loop's reuse
        "--block-size", str(args.block_size),
        "--num-gpu-blocks-override", str(args.vllm_kv_tokens // args.block_size),
        "--max-num-batched-tokens", str(args.max_batch_tokens),
        "--max-num-seqs", str(args.max_num_seqs),
    ] + marks_flags(args)  # fmt: skip


def marks_flags(args: argparse.Namespace) -> list[str]:
    """Every server of a run measured by the servers loads the same middleware
    (`--middleware` is vLLM's flag, and `augserve serve` takes it the same way)."""
    return ["--middleware", MARKS] if args.measure == "server" else []


def vllm_server(args: argparse.Namespace, log: Path) -> ManagedServer:
    port = free_port()
    return ManagedServer(vllm_argv(args, port), port, _vllm_env(args, ours=False), log)


def plugin_options(policy: str, predictor: str, profile: Path, slo: Any) -> dict[str, Any]:
    """The plugin's `--additional-config` options (checked by PluginOptions here, so a
    bad setting fails before any server starts)."""
    opts: dict[str, Any] = {"policy": policy, "predictor": predictor, "profile": str(profile)}
    if slo is not None:
        opts |= {"slo_ttft": slo.ttft_slo, "slo_norm_latency": slo.norm_latency_slo}
    PluginOptions.from_mapping(opts, "bench_servers.plugin_options")
    return opts


def plugin_server(
    args: argparse.Namespace, policy: str, log: Path, profile: Path, slo: Any, predictor: str
) -> ManagedServer:
    """vLLM's server with our scheduler class inside (everything else as `vllm_server`),
    priced with `profile` (vLLM's measured times)."""
    port = free_port()
    opts = plugin_options(policy, predictor, profile, slo)
    argv = vllm_argv(args, port) + [
        "--scheduler-cls", PLUGIN, "--additional-config", json.dumps({"augserve": opts}),
    ]  # fmt: skip
    return ManagedServer(argv, port, _vllm_env(args), log)


def augserve_server(
    args: argparse.Namespace,
    policy: str,
    log: Path,
    profile: Path | None,
    slo: Any = None,
    predictor: str = "oracle",
) -> ManagedServer:
    """`augserve serve` on the model; with `slo` (the benchmark's SLOConfig) the
    scheduler is told the SLO it is judged by (`augserve-slo` triages by it)."""
    from tools_profile import kv_bytes

    port = free_port()
    argv = [
        str(AUGSERVE), "serve", "--model", args.model, "--served-model-name", "m",
        "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
        "--max-model-len", "2048", "--device", "cpu", "--policy", policy,
        "--block-size", str(args.block_size),
        "--num-device-blocks", str(args.kv_tokens // args.block_size),
        "--max-num-batched-tokens", str(args.max_batch_tokens),
        "--max-num-seqs", str(args.max_num_seqs), "--threads", str(args.threads),
        "--allow-scripted-tools", "--log-level", "warning", "--predictor", predictor,
    ]  # fmt: skip
    if args.swap_tokens:
        argv += ["--swap-space", f"{args.swap_tokens * kv_bytes(args.model) / 2**30:.6f}"]
    argv += ["--profile", str(profile) if profile is not None else "default"]
    argv += _slo_flags(slo) + marks_flags(args)
    return ManagedServer(argv, port, dict(os.environ), log)


def augserve_vllm_server(
    args: argparse.Namespace, policy: str, log: Path, profile: Path, slo: Any, predictor: str
) -> ManagedServer:
    """`augserve serve --engine vllm` (our server over vLLM's AsyncLLM, our scheduler
    inside) in vLLM's venv, with vLLM's settings of `vllm_server` and the same KV."""
    port = free_port()
    argv = [
        str(VLLM_PY), "-m", "augserve", "serve", "--engine", "vllm", "--model", args.model,
        "--served-model-name", "m", "--host", "127.0.0.1", "--port", str(port),
        "--dtype", "float32", "--max-model-len", "2048", "--policy", policy,
        "--block-size", str(args.block_size),
        "--num-device-blocks", str(args.vllm_kv_tokens // args.block_size),
        "--max-num-batched-tokens", str(args.max_batch_tokens),
        "--max-num-seqs", str(args.max_num_seqs), "--allow-scripted-tools",
        "--log-level", "warning", "--predictor", predictor, "--profile", str(profile),
        "--vllm-args", json.dumps({"enforce_eager": True}),
    ]  # fmt: skip
    return ManagedServer(argv + _slo_flags(slo) + marks_flags(args), port, _vllm_env(args), log)


def _slo_flags(slo: Any) -> list[str]:
    if slo is None:
        return []
    return ["--set", f"slo_ttft={slo.ttft_slo!r}", "--set",
            f"slo_norm_latency={slo.norm_latency_slo!r}"]  # fmt: skip


def calls_on_client(name: str) -> bool:
    """Rows whose server ends a request at each call (the client runs it and resubmits)."""
    return name == "vllm" or name.startswith("vllm-plugin:")


def client_extras(name: str, agents: bool) -> Extras:
    """What the client adds to each request of row `name`: plain vLLM gets the plan in
    `vllm_xargs` (which it ignores) and the plugin gets it only with a predictor that
    reads plans; with `online` the plugin's client sends no plan at all. In the agent
    loop, augserve's servers are told which turns end in a client call."""
    if agents:
        return plain_turn_extras if calls_on_client(name) else augserve_turn_extras
    if name.startswith("vllm-plugin:") and name.endswith("+online"):
        return _session_only
    return vllm_extras


def _session_only(req: ToolRequest, k: int) -> dict[str, Any]:
    return {}  # replay adds `session_id`: the OpenAI fields and the session, nothing else


def measure(srv: ManagedServer) -> tuple[float, float]:
    """(batch-1 decode iteration, 256-token prefill) in seconds."""
    return asyncio.run(decode_iteration_time(srv.base_url, "m")), asyncio.run(
        prefill_time(srv.base_url, 256)
    )
