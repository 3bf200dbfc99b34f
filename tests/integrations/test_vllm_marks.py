"""vLLM's own OpenAI server loads the benchmarks' server-side marks middleware
(`--middleware augserve.bench.request_marks.RequestMarks`) and times a streamed
completion as our server does (vLLM's venv only: run_plugin_tests.sh). This is what
lets a protocol run read both sides on the servers (`settings.measure = "server"`)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("vllm")

import httpx  # noqa: E402

from tests.integrations.server_wait import wait_healthy  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
       "VLLM_CPU_OMP_THREADS_BIND": "0-1", "HF_HUB_OFFLINE": "1"}  # fmt: skip


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from augserve.engine.make_model import make_model

    tmp = tmp_path_factory.mktemp("vllm-marks")
    model = make_model("llama", "small", tmp / "m", overrides={"tie_word_embeddings": False})
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
           "--served-model-name", "m", "--port", str(port), "--dtype", "float32",
           "--max-model-len", "1024", "--enforce-eager", "--num-gpu-blocks-override", "64",
           "--middleware", "augserve.bench.request_marks.RequestMarks"]  # fmt: skip
    env = {**os.environ, **{k: os.environ.get(k, v) for k, v in ENV.items()},
           "PYTHONPATH": str(ROOT)}  # fmt: skip
    log = tmp / "server.log"
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    wait_healthy(proc, base, log)
    yield base
    proc.terminate()
    proc.wait(60)


def test_vllms_server_marks_a_stream_with_our_middleware(url: str) -> None:
    body = {"model": "m", "prompt": list(range(5, 45)), "max_tokens": 6, "stream": True,
            "temperature": 0.0, "ignore_eos": True, "return_token_ids": True}  # fmt: skip
    before = time.monotonic()
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=120,
                      headers={"x-request-marks-id": "r/0"}) as r:  # fmt: skip
        assert r.status_code == 200
        chunks = [json.loads(ln[6:]) for ln in r.iter_lines() if ln.startswith("data: {")]
    after = time.monotonic()
    ids = [i for c in chunks for i in c["choices"][0].get("token_ids") or []]
    unmarked = httpx.post(url + "/v1/completions", json={**body, "stream": False}, timeout=120)
    assert unmarked.status_code == 200
    marks = httpx.get(url + "/request-marks", timeout=10).json()
    assert len(ids) == 6 and list(marks) == ["r/0"]
    m = marks["r/0"]
    assert before <= m["body"] < m["first"] <= m["last"] <= after
    assert httpx.get(url + "/request-marks", timeout=10).json() == {}
