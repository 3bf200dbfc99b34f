"""What `isolate: true` costs: a sync Python tool's call on its thread pool against the
same call in a warm worker process, and the start of a new worker (after a kill).

    python benchmarks/bench_tool_isolation.py --calls 200 --out docs/data/tool_isolation.json

Median per-call latency through `ToolRegistry.run` (schema check, limits, timeout and
all), sequential calls, in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

from augserve.engine.tools import ParsedCall
from augserve.server.tool_config import ToolsConfig
from augserve.server.tool_registry import ToolRegistry
from augserve.server.tool_workers import ProcessWorkers


def add(a: int, b: int) -> int:
    return a + b


async def measure(calls: int) -> dict[str, float]:
    tools = [
        {"name": "threaded", "python": "bench_tool_isolation:add"},
        {"name": "isolated", "python": "bench_tool_isolation:add", "isolate": True},
    ]
    reg = ToolRegistry(ToolsConfig.from_dict({"tools": tools}))
    await reg.start()
    out: dict[str, float] = {}
    try:
        for name in ("threaded", "isolated"):
            await reg.run(ParsedCall(name, {"a": 1, "b": 2}))  # warm
            times = []
            for _ in range(calls):
                t0 = time.perf_counter()
                res = await reg.run(ParsedCall(name, {"a": 1, "b": 2}))
                times.append(time.perf_counter() - t0)
                assert res.error is None and res.text == "3", res
            out[f"{name}_call_ms"] = statistics.median(times) * 1e3
        workers = ProcessWorkers("bench_tool_isolation:add", 1)
        starts = []
        for _ in range(3):
            t0 = time.perf_counter()
            await workers.call({"a": 1, "b": 2})  # a fresh worker each time
            starts.append(time.perf_counter() - t0)
            await workers.close()
        out["worker_start_ms"] = statistics.median(starts) * 1e3
    finally:
        await reg.close()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--out", default=None)
    a = p.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    res = asyncio.run(measure(a.calls))
    res["load_avg_1min"] = os.getloadavg()[0]
    res["cpus"] = os.cpu_count() or 0
    print(json.dumps(res, indent=1))
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
