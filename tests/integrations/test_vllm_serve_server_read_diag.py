"""The server-read diagnosis cell (docs/results-vllm-plugin.md, "r3, pre-registered"): r3's
config at 6.5 req/s, one draw, `serve --engine vllm` and plain vLLM each timed on its
own server and by the client. Every finished request had its marks; on the servers both
meet the SLO for 99%, while the client's reading takes 6 points off vLLM and 25 off
ours. Not the protocol: one cell, one draw."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "data" / "vs-vllm-serve-engine-vllm-diag-server-read.json"
CONFIG = ROOT / "benchmarks" / "configs" / "diag-engine-vllm-server-read.json"
OURS = "augserve-vllm:augserve+online"


def test_both_servers_marked_every_request_and_the_readings_differ_as_stated() -> None:
    d = json.loads(DATA.read_text())
    assert d["config_sha256"] == hashlib.sha256(CONFIG.read_bytes()).hexdigest()
    rows = {r["engine"]: r for r in d["rows"]}
    assert set(rows) == {"vllm", OURS} and d["repeats_run"] == [0]
    for r in rows.values():
        assert "--middleware augserve.bench.request_marks.RequestMarks" in d["servers"][r["engine"]]
        assert r["marks_missing"] == 0 and r["load_avg_1min"] < 2.0 and not r["errors"]
        assert r["metrics"]["num_requests"] == 170 and r["metrics"]["num_finished"] == 168
    server = {e: round(100 * r["metrics"]["slo_attainment"]) for e, r in rows.items()}
    client = {e: round(100 * r["metrics_client"]["slo_attainment"]) for e, r in rows.items()}
    assert server == {"vllm": 99, OURS: 99} and client == {"vllm": 93, OURS: 74}
    for r in rows.values():  # the servers see each first token no later than the client
        assert r["metrics"]["ttft_mean"] <= r["metrics_client"]["ttft_mean"]
