"""Server-side calls over vLLM's AsyncLLM with our scheduler inside (vLLM's venv only:
run_plugin_tests.sh). One engine launch in a child process (vllm_tools_runner.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")

RUNNER = Path(__file__).with_name("vllm_tools_runner.py")
VLLM_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
    "VLLM_CPU_OMP_THREADS_BIND": "0-1",
    "HF_HUB_OFFLINE": "1",
}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    from augserve.engine.make_model import make_model

    model = make_model(
        "llama", "small", tmp_path_factory.mktemp("vllm-tools") / "m",
        overrides={"tie_word_embeddings": False},
    )  # fmt: skip
    env = {**os.environ, **{k: os.environ.get(k, v) for k, v in VLLM_ENV.items()}}
    proc = subprocess.run(
        [sys.executable, str(RUNNER), "--model", str(model)],
        capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    log = proc.stdout + proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("@@ ")]
    assert proc.returncode == 0 and lines, f"tools run failed:\n{log[-4000:]}"
    return json.loads(lines[-1][3:]), log


def test_each_request_runs_its_turns_and_calls_inside_one_vllm_session(
    run: tuple[dict[str, Any], str],
) -> None:
    result, _ = run
    for rid in ("keep", "drop", "choose"):
        r = result[rid]
        assert r["done"] and r["turns"] == [6, 4, 3]  # the plan's segments, in order
        assert len(r["calls"]) == 2 and min(r["calls"]) >= 0.2  # two calls of 0.2 s


def test_the_scheduler_decides_each_pause_preserve_or_discard(
    run: tuple[dict[str, Any], str],
) -> None:
    _, log = run
    pauses = re.findall(r"augserve: pause (\S+): (preserve|discard)", log)
    by_id: dict[str, set[str]] = {}
    for rid, policy in pauses:
        by_id.setdefault(rid.split("-")[0], set()).add(policy)
    assert by_id.get("keep") == {"preserve"}
    assert by_id.get("drop") == {"discard"}
    assert by_id.get("choose")  # the policy's own choice, at each of its pauses
