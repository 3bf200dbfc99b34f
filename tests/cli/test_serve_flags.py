"""`augserve serve` takes vLLM's flag names and maps them onto the engine; `--help`
shows every flag's default and the policies; a busy port and a missing extra are one
line before anything is built."""

from __future__ import annotations

import argparse
import importlib.util
import socket
from pathlib import Path
from typing import Any

import pytest

from augserve.cli import build_parser, main
from augserve.cli.serve import engine_args
from augserve.sched.policies import POLICIES

VLLM_FLAGS = [
    "--gpu-memory-utilization", "0.5",
    "--max-num-seqs", "8",
    "--max-num-batched-tokens", "256",
    "--kv-cache-memory-bytes", "2GiB",
    "--enable-auto-tool-choice",
    "--uvicorn-log-level", "warning",
    "--enable-prefix-caching",
]  # fmt: skip


def test_vllm_flags_are_accepted_and_mapped() -> None:
    args = build_parser().parse_args(["serve", *VLLM_FLAGS])
    assert args.enable_auto_tool_choice and args.uvicorn_log_level == "warning"
    assert args.enable_prefix_caching is True
    eargs = engine_args(args, "m")
    assert (eargs.max_num_seqs, eargs.max_batch_tokens) == (8, 256)
    assert (eargs.kv_cache_memory, eargs.gpu_memory_utilization) == (2 * 2**30, 0.5)
    no = build_parser().parse_args(["serve", "--no-enable-prefix-caching"])
    assert no.enable_prefix_caching is False
    for size, want in (("500M", 500 * 10**6), ("4096", 4096), ("1.5Gi", 3 * 2**29)):
        assert (
            build_parser().parse_args(["serve", "--kv-cache-memory-bytes", size]).kv_cache_memory
            == want
        )


@pytest.mark.parametrize(
    "bad",
    [
        ["--gpu-memory-utilization", "1.5"],
        ["--gpu-memory-utilization", "0"],
        ["--kv-cache-memory-bytes", "lots"],
        ["--policy", "fifo"],
        ["--middleware", "nope.missing.Thing"],
    ],
)
def test_bad_values_are_one_line(bad: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", *bad]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and bad[0] in err


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    serve = sub.choices["serve"]
    return [a for a in serve._actions if a.option_strings and a.dest != "help"]


def test_help_shows_every_default_and_the_policies(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for policy in POLICIES:
        assert policy in text, policy
    flags_only = (argparse._StoreTrueAction, argparse._AppendAction)
    for action in _options(build_parser()):
        if isinstance(action, flags_only):
            continue
        assert action.help and "default" in action.help, action.option_strings
        if action.choices:
            for choice in action.choices:
                assert str(choice) in text, (action.option_strings, choice)


def test_a_busy_port_is_one_line_before_the_engine_is_built(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import augserve.server.default_model as dm

    def never(*a: Any, **k: Any) -> Any:
        raise AssertionError("the engine was built before the port was checked")

    monkeypatch.setattr(dm, "default_model", never)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["serve", "--port", str(port)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"--port {port}" in err and "in use" in err


def test_a_missing_extra_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *a: Any) -> Any:
        return None if name == "uvicorn" else real(name, *a)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    assert main(["serve"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [
        "augserve: error: this command needs the 'server' extra (missing: uvicorn): "
        "pip install 'augserve[server]'"
    ]


def test_gpu_memory_utilization_sizes_the_kv_from_free_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from augserve.engine import kv_budget
    from augserve.engine.builder import EngineArgs, build_runner
    from augserve.engine.make_model import make_model

    model = make_model("llama", "tiny", tmp_path / "m", seed=0)
    gib = 2**30
    monkeypatch.setattr(kv_budget, "device_memory", lambda device: (gib, 8 * gib))
    runner = build_runner(
        EngineArgs(model=str(model), dtype="fp32", gpu_memory_utilization=0.25, max_batch_tokens=64)
    )
    weights = kv_budget.model_bytes(runner.model)
    acts = kv_budget.activation_bytes(runner.model, 64)
    # CPU: a quarter of the RAM free at start (free + the weights), less weights and activations
    want = (int(0.25 * (gib + weights)) - weights - acts) // (runner.kv_bytes_per_token * 16)
    assert runner.num_device_blocks == want > 512
    explicit = build_runner(
        EngineArgs(model=str(model), dtype="fp32", gpu_memory_utilization=0.25, num_device_blocks=7)
    )
    assert explicit.num_device_blocks == 7  # an explicit size wins, as in vLLM
    cuda = kv_budget.kv_cache_bytes(
        0.5, __import__("torch").device("cuda"), 6 * gib, 8 * gib, gib, 0
    )
    assert cuda == 3 * gib - kv_budget.CUDA_SLACK  # half of the device, less the weights
    with pytest.raises(ValueError, match="gpu_memory_utilization=0.01"):
        kv_budget.kv_cache_bytes(0.01, __import__("torch").device("cpu"), gib, 8 * gib, gib, 0)


def test_reproduce_names_the_predictor_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "sklearn" else real(n, *a)
    )
    assert main(["reproduce", "--quick", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "pip install 'augserve[predictor]'" in err and "Traceback" not in err


def test_the_server_extra_brings_the_openai_client() -> None:
    import tomllib

    meta = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    server = meta["project"]["optional-dependencies"]["server"]
    assert any(req.startswith("openai") for req in server)
