"""`augserve serve` as a user runs it: without --model it builds and serves the embedded
default model from the cache folder; SIGTERM aborts running requests with a clear
finish reason, exits 0 and frees the port."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from augserve.cli import build_parser


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_flags_follow_vllm() -> None:
    args = build_parser().parse_args(
        [
            "serve",
            "--model",
            "m",
            "--host",
            "0.0.0.0",
            "--port",
            "9000",
            "--served-model-name",
            "a",
            "b",
            "--max-model-len",
            "256",
            "--dtype",
            "float32",
            "--api-key",
            "k",
            "--policy",
            "vllm",
            "--tools",
            "t.yaml",
            "--predictor",
            "noisy:0.2",
        ]
    )
    assert (args.host, args.port, args.served_model_name) == ("0.0.0.0", 9000, ["a", "b"])
    assert (args.max_model_len, args.dtype, args.api_key) == (256, "float32", ["k"])
    assert (args.policy, args.tools, args.predictor) == ("vllm", "t.yaml", "noisy:0.2")
    assert build_parser().parse_args(["serve"]).host == "127.0.0.1"
    assert build_parser().parse_args(["serve"]).dtype == "auto"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--port", "70000"])


def test_set_passes_scheduler_fields_and_rejects_unknown_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from augserve.bench.runner import parse_overrides
    from augserve.engine.builder import EngineArgs

    args = build_parser().parse_args(
        ["serve", "--policy", "augserve-slo", "--set", "slo_reserve=0.05", "--set", "beta=1e-6"]
    )
    over = parse_overrides(args.set)
    assert over == {"slo_reserve": 0.05, "beta": 1e-6}
    cfg = EngineArgs(model="m", policy=args.policy, scheduler=over).scheduler_config()
    assert (cfg.policy, cfg.slo_reserve, cfg.beta) == ("augserve-slo", 0.05, 1e-6)
    for bad in ("no_such_field=1", "slo_reserve", "beta=fast"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["serve", "--set", bad])
    assert "no_such_field" in capsys.readouterr().err


def test_auto_dtype_is_the_saved_one(tmp_path: Path) -> None:
    from augserve.cli.serve import _auto_dtype

    (tmp_path / "config.json").write_text(json.dumps({"torch_dtype": "bfloat16"}))
    assert _auto_dtype(str(tmp_path)) == "bf16"
    (tmp_path / "config.json").write_text(json.dumps({"torch_dtype": "float32"}))
    assert _auto_dtype(str(tmp_path)) == "fp32"
    (tmp_path / "config.json").write_text("{}")
    assert _auto_dtype(str(tmp_path)) is None  # the engine's default
    assert _auto_dtype(str(tmp_path / "missing")) is None


def test_default_model_serves_and_sigterm_shuts_down_cleanly(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "AUGSERVE_API_KEY": "k"}
    env["AUGSERVE_DEFAULT_MODEL"] = "random"  # the embedded model (SmolLM2: test_smollm2_*)
    log = (tmp_path / "server.log").open("w")
    cmd = [
        sys.executable,
        "-m",
        "augserve",
        "serve",
        "--port",
        str(port),
        "--threads",
        "1",
        "--shutdown-grace",
        "0.5",
        "--dtype",
        "float32",
        "--log-level",
        "info",
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    headers = {"Authorization": "Bearer k"}
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (tmp_path / "server.log").read_text()
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.2)
        (model_dir,) = (tmp_path / "cache" / "augserve").glob("default-model-*")
        assert "chat_template" in json.loads((model_dir / "tokenizer_config.json").read_text())
        models = httpx.get(url + "/v1/models", headers=headers).json()
        assert [m["id"] for m in models["data"]] == ["augserve-default"]
        body = {
            "model": "augserve-default",
            "max_tokens": 6,
            "temperature": 0,
            "messages": [{"role": "user", "content": "Hello!"}],
        }
        r = httpx.post(url + "/v1/chat/completions", json=body, headers=headers, timeout=60)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1

        events: list[dict] = []

        def long_stream() -> None:
            req = {**body, "max_tokens": 1500, "ignore_eos": True, "stream": True}
            with httpx.stream(
                "POST", url + "/v1/chat/completions", json=req, headers=headers, timeout=60
            ) as resp:
                for line in resp.iter_lines():
                    if line.startswith("data: {"):
                        events.append(json.loads(line[6:]))

        reader = threading.Thread(target=long_stream)
        reader.start()
        while len(events) < 3:
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        reader.join(30)
        # uvicorn re-raises the signal once shut down, so the parent sees SIGTERM's status
        assert proc.wait(30) in (0, -signal.SIGTERM)
        text = (tmp_path / "server.log").read_text()
        assert "Application shutdown complete" in text and "Traceback" not in text, text
        finals = [c["choices"][0]["finish_reason"] for c in events if c["choices"]]
        assert finals[-1] == "abort"  # cut by the shutdown, and the client was told
        with socket.socket() as s:  # the port is free again
            s.bind(("127.0.0.1", port))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


def test_the_servers_slo_is_the_schedulers_unless_set_says_otherwise() -> None:
    """One SLO: `--slo-ttft` / `--slo-norm-latency` reach the scheduler (augserve-slo
    triages by them); an explicit `--set` of the same field wins."""
    from augserve.cli.serve import scheduler_overrides
    from augserve.engine.builder import EngineArgs

    args = build_parser().parse_args(
        ["serve", "--policy", "augserve-slo", "--slo-ttft", "0.4", "--slo-norm-latency", "0.05"]
    )
    over = scheduler_overrides(args)
    cfg = EngineArgs(model="m", policy=args.policy, scheduler=over).scheduler_config()
    assert (cfg.slo_ttft, cfg.slo_norm_latency) == (0.4, 0.05)
    args = build_parser().parse_args(["serve", "--slo-ttft", "0.4", "--set", "slo_ttft=0.3"])
    assert scheduler_overrides(args)["slo_ttft"] == 0.3
