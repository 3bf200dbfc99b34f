"""`augserve serve --engine vllm` without vLLM (the project's own suite): the flags'
mapping to vLLM's engine arguments, the /metrics surface, and the refusals."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from augserve.cli import build_parser
from augserve.engine.grammar import GrammarError
from augserve.engine.sampling_params import GrammarSpec
from augserve.integrations.vllm_face import IN_VLLM, RESUBMIT, NoGrammars, VllmStats
from augserve.integrations.vllm_serve import SCHEDULER, engine_kwargs, extra_args, not_mapped


def _args(*flags: str) -> SimpleNamespace:
    ns = build_parser().parse_args(["serve", "--engine", "vllm", *flags])
    return SimpleNamespace(**vars(ns))


def test_serve_flags_map_to_vllm_engine_args_with_our_scheduler_inside() -> None:
    args = _args("--policy", "augserve-slo", "--block-size", "32", "--num-device-blocks", "80",
                 "--max-model-len", "2048", "--max-num-batched-tokens", "256",
                 "--slo-ttft", "2.5", "--profile", "llama3-70b-4xa100",
                 "--set", "beta=1e-6")  # fmt: skip
    kw = engine_kwargs(args, "/m", "fp32")
    assert kw["scheduler_cls"] == SCHEDULER and kw["model"] == "/m"
    assert kw["dtype"] == "float32" and kw["block_size"] == 32
    assert kw["num_gpu_blocks_override"] == 80 and kw["max_model_len"] == 2048
    assert kw["max_num_batched_tokens"] == 256 and kw["enable_prefix_caching"] is True
    assert kw["disable_log_stats"] is False  # /metrics reads vLLM's scheduler stats
    assert kw["additional_config"]["augserve"] == {
        "policy": "augserve-slo",
        "predictor": "online",
        "slo_ttft": 2.5,
        "slo_norm_latency": 0.1,
        "profile": "llama3-70b-4xa100",
        "beta": 1e-6,
    }
    assert "gpu_memory_utilization" not in kw  # vLLM's own default unless given


def test_vllm_args_add_engine_arguments_and_merge_plugin_options() -> None:
    extra = {"enforce_eager": True, "additional_config": {"augserve": {"decision_log": 9},
                                                          "other": 1}}  # fmt: skip
    args = _args("--no-enable-prefix-caching", "--vllm-args", json.dumps(extra))
    kw = engine_kwargs(args, "/m", None)
    assert kw["enforce_eager"] is True and kw["dtype"] == "auto"
    assert kw["enable_prefix_caching"] is False
    assert kw["additional_config"]["other"] == 1
    assert kw["additional_config"]["augserve"]["decision_log"] == 9
    assert kw["additional_config"]["augserve"]["policy"] == "augserve"


@pytest.mark.parametrize(("text", "msg"), [("{", "not JSON"), ("[1]", "JSON object")])
def test_bad_vllm_args_name_the_flag(text: str, msg: str) -> None:
    with pytest.raises(ValueError, match=msg) as err:
        extra_args(text)
    assert "--vllm-args" in str(err.value)


def test_flags_vllm_cannot_honour_are_named() -> None:
    assert not_mapped(_args()) == []
    assert not_mapped(_args("--swap-space", "2", "--threads", "2")) == [
        "--swap-space",
        "--threads",
    ]


def test_stats_show_vllms_state_and_the_requests_in_calls() -> None:
    stats = VllmStats(num_blocks=80)
    pc = SimpleNamespace(queries=100, hits=64)
    sched = SimpleNamespace(num_running_reqs=3, num_waiting_reqs=2, kv_cache_usage=0.25,
                            prefix_cache_stats=pc)  # fmt: skip
    stats.record(sched)
    stats.record(sched)  # vLLM's prefix-cache counts are per interval: they add up
    stats.paused.update({"a": IN_VLLM, "b": IN_VLLM, "c": RESUBMIT})
    s = stats.snapshot()
    assert (s.num_running, s.num_waiting) == (3, 2)
    assert (s.device_blocks_used, s.device_blocks_total) == (20, 80)
    assert (s.prefix_cache_queries, s.prefix_cache_hits) == (200, 128)
    # /metrics sums every pause into state="paused"; only a resubmitted one is a Discard
    assert s.num_paused == {IN_VLLM: 2, "discard": 1}


def test_structured_outputs_are_refused_by_the_grammar_compiler() -> None:
    grammars = NoGrammars()
    assert grammars.cache.get(GrammarSpec("json_object")) is None
    with pytest.raises(GrammarError, match="--engine vllm"):
        grammars.build(GrammarSpec("json_object"))


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed")
def test_without_vllm_serve_says_so_in_one_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "augserve", "serve", "--engine", "vllm", "--port", "0"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln]
    assert len(lines) == 1 and "--engine vllm needs vLLM installed" in lines[0], proc.stderr
