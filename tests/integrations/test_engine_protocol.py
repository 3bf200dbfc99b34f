"""The engine-throughput comparison under the protocol (benchmarks/vs_vllm/
engine_protocol.py, bench_vs_vllm.py --config): the config's fields are checked by
name, the paired ratios and intervals are the replies' own, and a real run of the
driver (augserve against HF on a small random model) records every repeat, its load
and the config it followed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "vs_vllm"))

from engine_protocol import load_engine_config, ratio, summarize  # noqa: E402

COMMITTED = ROOT / "benchmarks" / "configs" / "engine-vs-vllm-hf-r1.json"


def _config(tmp_path: Path, **settings: Any) -> Path:
    base = json.loads(COMMITTED.read_text())
    base["settings"].update(settings)
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(base))
    return path


def test_the_committed_config_fixes_equal_memory_threads_and_three_repeats() -> None:
    cfg, sha = load_engine_config(COMMITTED)
    assert cfg.engines == ("augserve", "vllm-compiled", "hf") and cfg.repeats >= 3
    assert cfg.augserve_compile is None and cfg.threads == 2 and len(sha) == 64
    assert set(cfg.hf_workloads) <= set(cfg.workloads)


@pytest.mark.parametrize(
    ("field", "value"),
    [("repeats", 2), ("engines", ["hf", "vllm-eager"]), ("workloads", ["b16", "b99"]),
     ("hf_workloads", ["nope"]), ("threads", 0), ("kv_gib", 0), ("engines", ["augserve"])],
)  # fmt: skip
def test_a_bad_setting_is_refused_by_name(tmp_path: Path, field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=field):
        load_engine_config(_config(tmp_path, **{field: value}))


def test_ratios_pair_the_repeats_and_invert_for_ms_per_token() -> None:
    res = {
        "b16": {"augserve": [{"value": 50.0}, {"value": 40.0}, {"value": 45.0}],
                "hf": [{"value": 25.0}, {"value": 40.0}, {"value": 30.0}]},
        "decode1": {"augserve": [{"value": 10.0}] * 3, "hf": [{"value": 20.0}] * 3},
    }  # fmt: skip
    out = summarize(res, {"b16": "throughput", "decode1": "decode1"})
    b16 = out["b16"]["ratio_over"]["hf"]
    assert b16["per_repeat"] == [2.0, 1.0, 1.5] and b16["mean"] == pytest.approx(1.5)
    assert b16["low"] < 1.0 < b16["high"] and b16["n"] == 3  # wide with 3 repeats
    assert out["b16"]["engines"]["augserve"]["values"] == [50.0, 40.0, 45.0]
    assert out["decode1"]["ratio_over"]["hf"]["mean"] == 2.0  # half the ms a token
    assert ratio(10.0, 20.0, "decode1") == 2.0 and ratio(10.0, 20.0, "throughput") == 0.5


def test_the_driver_records_every_repeat_under_its_config(tmp_path: Path) -> None:
    from augserve.engine.make_model import make_model

    model = tmp_path / "model"
    make_model("llama", "small", model, untied=True)
    cfg = _config(tmp_path, engines=["augserve", "hf"], workloads=["b16", "decode1"],
                  hf_workloads=["decode1"], threads=1, kv_gib=1, model=str(model))  # fmt: skip
    out = tmp_path / "result.json"
    cmd = [sys.executable, str(ROOT / "benchmarks/vs_vllm/bench_vs_vllm.py"),
           "--config", str(cfg), "--out", str(out)]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(cmd, check=True, env=env, timeout=600, capture_output=True, cwd=ROOT)
    blob = json.loads(out.read_text())
    proto = blob["protocol"]
    assert proto["config_sha256"] == load_engine_config(cfg)[1] and proto["repeats"] == 3
    assert len(proto["load"]) == 3 and all(x >= 0 for x in proto["load"])
    assert proto["memory"]["augserve_kv_bytes"] == proto["memory"]["baseline_kv_bytes"] == 1 << 30
    assert blob["engines"]["augserve"]["ready"] and blob["header"]["commit"] is not None
    stats = proto["stats"]
    assert set(stats["b16"]["engines"]) == {"augserve"}  # HF only where the config says
    dec = stats["decode1"]
    assert [len(dec["engines"][e]["values"]) for e in ("augserve", "hf")] == [3, 3]
    raw = blob["raw"]["decode1"]
    again = [h["value"] / o["value"] for o, h in zip(raw["augserve"], raw["hf"], strict=True)]
    assert dec["ratio_over"]["hf"]["per_repeat"] == pytest.approx(again)
    # the same greedy ids from both (random untied weights, fp32)
    assert blob["summary"]["decode1"]["greedy_agreement"]["hf"] >= 0.9


def test_the_committed_run_followed_its_config_and_states_its_ratios() -> None:
    """docs/engine-speed.md, "Under the comparison protocol": 3 repeats of the committed
    config; augserve over vLLM 0.90 / 0.95 / 0.92 (16 x 512, 64 x 128, batch-1 decode),
    over HF 1.51 / 1.59; only the 64-prompt batch's interval lies wholly below 1."""
    blob = json.loads((ROOT / "docs" / "data" / "engine-vs-vllm-hf-r1.json").read_text())
    proto, stats = blob["protocol"], blob["protocol"]["stats"]
    assert proto["config"] == str(COMMITTED.relative_to(ROOT))
    assert proto["config_sha256"] == load_engine_config(COMMITTED)[1]
    assert proto["repeats"] == 3 and len(proto["load"]) == 3
    assert proto["memory"]["augserve_kv_bytes"] == proto["memory"]["baseline_kv_bytes"]
    assert set(blob["engines"]) == {"augserve", "vllm-compiled", "hf"}
    kinds = {"b16": "throughput", "b64": "throughput", "decode1": "decode1"}
    assert summarize(blob["raw"], kinds) == stats  # the statistics are the replies' own
    over_vllm = {wl: s["ratio_over"]["vllm-compiled"] for wl, s in stats.items()}
    assert {wl: round(r["mean"], 2) for wl, r in over_vllm.items()} == {
        "b16": 0.90, "b64": 0.95, "decode1": 0.92}  # fmt: skip
    assert [wl for wl, r in over_vllm.items() if r["high"] < 1.0] == ["b64"]
    over_hf = {wl: round(s["ratio_over"]["hf"]["mean"], 2) for wl, s in stats.items()
               if "hf" in s["ratio_over"]}  # fmt: skip
    assert over_hf == {"b16": 1.51, "decode1": 1.59}
    for wl in stats:  # greedy ids agree across the engines
        assert all(v == 1.0 for v in blob["summary"][wl]["greedy_agreement"].values())
