"""AugServeScheduler inside vLLM (runs only where vLLM is installed: run_plugin_tests.sh).

Three engine launches, each in a child process (vLLM's engine owns process-wide
state): vLLM's default scheduler in-process, our class by dotted path in the
default multiprocess mode, and our class object in-process, which then also
drives the engine step by step (see vllm_runner.py). Minutes on two cores.
"""

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

from augserve.sched.budget import dynamic_token_budget  # noqa: E402

RUNNER = Path(__file__).with_name("vllm_runner.py")
VLLM_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
    "VLLM_CPU_OMP_THREADS_BIND": "0-1",
    "HF_HUB_OFFLINE": "1",
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from augserve.engine.make_model import make_model

    out = tmp_path_factory.mktemp("vllm-model") / "llama-small"
    return make_model("llama", "small", out, overrides={"tie_word_embeddings": False})


def launch(model: Path, scheduler: str, *extra: str) -> tuple[dict[str, Any], str]:
    env = {**os.environ, **{k: os.environ.get(k, v) for k, v in VLLM_ENV.items()}}
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    proc = subprocess.run(
        [sys.executable, str(RUNNER), "--model", str(model), "--scheduler", scheduler, *extra],
        capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    log = proc.stdout + proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("@@ ")]
    assert proc.returncode == 0 and lines, f"{scheduler} run failed:\n{log[-4000:]}"
    return json.loads(lines[-1][3:]), log


@pytest.fixture(scope="module")
def runs(model_dir: Path) -> dict[str, tuple[dict[str, Any], str]]:
    return {s: launch(model_dir, s) for s in ("default", "path", "class")}


def test_dotted_path_loads_in_the_spawned_engine_process(runs: dict[str, Any]) -> None:
    _, log = runs["path"]
    assert re.search(r"\(EngineCore[^)]*\).*augserve scheduler: policy augserve", log)
    assert "augserve scheduler:" not in runs["default"][1]


def test_class_object_loads_in_process(runs: dict[str, Any]) -> None:
    result, log = runs["class"]
    assert result["scheduler"] == "AugServeScheduler"
    assert re.search(r"\(MainProcess[^)]*\).*augserve scheduler: policy augserve", log)


def test_every_request_answered_with_the_default_schedulers_greedy_outputs(
    runs: dict[str, Any],
) -> None:
    default = runs["default"][0]["outputs"]
    assert [len(o) for o in default] == runs["default"][0]["expected_lengths"]
    assert runs["path"][0]["outputs"] == default
    assert runs["class"][0]["outputs"] == default


def first_scheduled(decisions: list[dict[str, Any]]) -> list[str]:
    order: list[str] = []
    for d in decisions:
        order += [rid for rid in d["scheduled"] if rid not in order]
    return order


def test_tight_budget_serves_the_crafted_batch_in_policy_order(runs: dict[str, Any]) -> None:
    result = runs["class"][0]
    crafted = result["crafted"]
    costs: dict[str, float] = crafted["costs"]
    by_cost = sorted(costs, key=lambda r: costs[r])
    assert by_cost != list(costs)  # the batch was submitted in another order
    assert first_scheduled(crafted["decisions"])[:4] == by_cost
    assert [r for r in crafted["finished"] if r in costs] == by_cost


def test_each_step_takes_the_dynamic_budget_of_vllms_free_blocks(runs: dict[str, Any]) -> None:
    result = runs["class"][0]
    t_max, block = result["static_budget"], result["block_size"]
    budgets = []
    for d in result["crafted"]["decisions"]:
        want = dynamic_token_budget(d["free_blocks"], 0, block, t_max, 0.5, 1.0)
        assert d["budget"] == want
        assert sum(d["scheduled"].values()) <= d["budget"]
        budgets.append(d["budget"])
    assert min(budgets) < t_max  # the cache-filling request shrank it
    assert max(budgets) == t_max


def test_resubmitted_context_is_a_return_refined_by_the_prefix_cache(
    runs: dict[str, Any],
) -> None:
    result = runs["class"][0]
    kept, reset = result["kept"], result["reset"]
    assert kept["mirror"]["segment_index"] == reset["mirror"]["segment_index"] == 1
    assert kept["mirror"]["calls"] == [[5, "preserve"]]  # context still cached: Preserve
    assert reset["mirror"]["calls"] == [[5, "discard"]]  # cache reset: recompute
    assert reset["mirror"]["cost"] > kept["mirror"]["cost"]
    assert kept["answered"] == reset["answered"] == 4


def test_a_held_session_turn_keeps_its_blocks_until_its_resubmission_runs(
    runs: dict[str, Any],
) -> None:
    """`augserve_context: preserve` on a session's turn: vLLM's `_free_blocks` leaves its
    4 blocks (105 computed tokens of 32) referenced; the resubmission finds the context
    (a Preserve return), and once it has run they are free again. A second held turn
    is freed for a request that needs the whole cache, which then runs."""
    h = runs["class"][0]["held"]
    assert h["holding"]["holds"] == 1 and h["holding"]["blocks"] == 4
    assert h["holding"]["free"] == h["before"] - 4
    assert h["mirror"]["calls"] == [[5, "preserve"]] and h["answered"] == 4
    assert h["after"] == {"holds": 0, "free": h["before"]}
    p = h["pressed"]
    assert p["holds"] == 1 and p["holds_after"] == 0 and p["answered"] == 4
    assert p["counts"]["pressure"] == 1 and p["counts"]["taken_over"] == 1


def test_the_admission_gate_cuts_preemptions_of_an_overloaded_batch(
    runs: dict[str, Any], model_dir: Path
) -> None:
    """Six 150-token requests, 100 tokens each (8 blocks of 32 at the end), in 35 blocks:
    with `augserve` (no gate) vLLM admits them all and preempts as they grow. Under
    `augserve-slo` with the whole growth kept (admit_growth 1, told the output by the
    oracle) the gate lets 4 run (4 x 8 <= 35) and the others wait: no preemption. Every
    request gets its 100 tokens either way."""
    free = runs["class"][0]["overloaded"]
    opts = '{"admit_growth": 1.0, "predictor": "oracle"}'
    gated = launch(model_dir, "class", "--policy", "augserve-slo", "--options", opts)[0]
    gated = gated["overloaded"]
    assert free["tokens"] == gated["tokens"] == [100] * 6
    assert free["gated_steps"] == 0 and gated["gated_steps"] > 0
    assert free["preemptions"] > 0 and gated["preemptions"] == 0


def test_streaming_session_pauses_with_its_kv_and_resumes_as_preserve(
    runs: dict[str, Any],
) -> None:
    stream = runs["class"][0]["stream"]
    paused, resumed = stream["paused"], stream["resumed"]
    assert paused["mirror"]["in_call"] and paused["mirror"]["calls"] == [[0, "preserve"]]
    assert resumed["mirror"]["segment_index"] == 1 and not resumed["mirror"]["in_call"]
    assert resumed["mirror"]["calls"] == [[7, "preserve"]]
    assert stream["free_after"] > paused["free"] == resumed["free"]  # KV held in the call
    assert len(stream["tokens"]) == 5 + 3


def test_streaming_session_paused_under_discard_releases_its_kv_and_recomputes(
    runs: dict[str, Any],
) -> None:
    stream = runs["class"][0]["stream_discard"]
    paused, resumed = stream["paused"], stream["resumed"]
    assert paused["mirror"]["in_call"] and paused["mirror"]["calls"] == [[0, "discard"]]
    assert paused["free"] == stream["before"]  # every block released (to the prefix cache)
    assert resumed["mirror"]["calls"] == [[7, "discard"]]  # no KV kept: a Discard return
    assert len(stream["tokens"]) == 5 + 3  # and the session still answers both turns


def test_the_online_predictor_learns_from_vllms_turns_and_plans_unplanned_requests(
    runs: dict[str, Any],
) -> None:
    result = runs["class"][0]
    assert result["predictor"] == "online"  # the default
    # 8 greedy + 5 crafted requests ended; two resubmitted turns and two streaming
    # pauses ended in calls (each stream's second pause too: a segment, then aborted)
    assert result["learned"] == {"segments": 19, "calls": 4}
    # every turn so far generated 4-40 tokens: a 300-token max_tokens is not the plan
    planned = result["unplanned"]
    assert planned["segments"] == 0 and 4 <= planned["pred_output_len"] <= 40
