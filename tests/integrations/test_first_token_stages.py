"""The diagnosis of `serve --engine vllm`'s first tokens (docs/results-vllm-plugin.md, "The
first token's path, stage by stage"): the numbers the docs state are in the committed
runs, and what they conclude holds in them: every stage the server performs is short,
the long waits are the two in which it waits for the client."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "data"
OURS = "augserve-vllm:vllm"
SERVER_WORK = ("head", "validate", "prep_queue", "prepare", "to_loop", "to_engine", "to_client")


def _row(name: str, server: str = OURS) -> dict[str, Any]:
    data = json.loads((DATA / f"vs-vllm-serve-engine-vllm-first-token-{name}.json").read_text())
    rows: dict[str, dict[str, Any]] = {r["server"]: r for r in data["rows"]}
    assert "--rate 6.5" in data["command"] and "--policy vllm" in data["command"]
    return rows[server]["loaded"]


def test_the_client_waits_the_docs_state() -> None:
    stages = _row("stages")
    cpu, plain = _row("cpu"), _row("cpu", "vllm")
    proto = _row("connect")
    got = [round(r["slo_attainment"] * 100) for r in (stages, cpu, plain, proto)]
    assert got == [70, 73, 73, 47]
    assert [round(r["ttft_p95"], 2) for r in (stages, cpu, plain, proto)] == [1.1, 0.86, 0.63, 2.22]
    s = proto["stages"]
    assert (round(s["connect"]["mean"], 3), round(s["read"]["mean"], 3)) == (0.047, 0.14)
    assert (s["read"]["p95_le"], s["read"]["p99_le"], s["connect"]["p99_le"]) == (1.0, 2.5, 1.0)


def test_the_server_s_own_stages_are_short_and_the_client_s_waits_are_long() -> None:
    for name in ("stages", "cpu", "connect"):
        s = _row(name)["stages"]
        assert s["loop_lag"]["p99_le"] <= 0.0025
        assert s["engine"]["mean"] < 0.02 and s["engine"]["p95_le"] <= 0.1
        assert all(s[k]["mean"] < 0.001 and s[k]["count"] == 186 for k in SERVER_WORK if k in s)
    s = _row("connect")["stages"]
    waits = s["connect"]["mean"] + s["read"]["mean"]
    work = sum(s[k]["mean"] for k in SERVER_WORK) + s["engine"]["mean"]
    assert waits > 10 * work


def test_the_cores_were_used_alike_on_both_sides() -> None:
    for row in (_row("cpu"), _row("cpu", "vllm")):
        cpu = row["usage"]["server_cpu_s"]
        worker = next(v for k, v in cpu.items() if k.endswith("VLLM::Worker"))
        assert 220 < worker < 240 and row["usage"]["client_cpu_s"] < 6
