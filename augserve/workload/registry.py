"""`make_workload(name, n, seed, **kw)`: workloads by name.

Names (see docs/trace-format.md):

- `infercept`: the real INFERCEPT trace (`data_dir/infercept/merged_exp_uniform.json`),
  resampled uniformly with replacement to `n` requests.
- `infercept-oneapi`: the same for `diverse_oneapi_merged_exp_uniform.json`.
- `infercept-like`: synthetic, per-kind distributions fitted from the real
  trace (`kinds=("math", "qa")` restricts the mix).
- `toolbench-like`: synthetic ToolBench-style agents.
- `agent-sessions`: multi-turn agent sessions with client-side tools and think time
  (`agent_sessions.py`); `n` counts sessions.
- `bfcl-multi-turn`: BFCL's `multi_turn_base` conversations as agent sessions, tool
  latencies and think time drawn (`bfcl_multi_turn.py`); `n` counts sessions.
- `resample:PATH`: a trace file (`.json` INFERCEPT, `.jsonl` ours) resampled
  with replacement to `n` requests.
- `file:PATH`: a trace file as is (first `n` requests; `n <= 0` for all).
- `mixed:FRACTION[:BASE]`: BASE (default `infercept-like`) with the calls of
  FRACTION of the requests disabled (paper D.1 uses `mixed:0.5:infercept`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from augserve.workload.agent_sessions import agent_sessions
from augserve.workload.bfcl_multi_turn import bfcl_multi_turn
from augserve.workload.generators import infercept_like, mix_no_call, resample, toolbench_like
from augserve.workload.infercept import load_infercept
from augserve.workload.jsonl import read_jsonl
from augserve.workload.trace import Trace

INFERCEPT_FILE = "merged_exp_uniform.json"
INFERCEPT_ONEAPI_FILE = "diverse_oneapi_merged_exp_uniform.json"
WORKLOAD_NAMES = (
    "infercept",
    "infercept-oneapi",
    "infercept-like",
    "toolbench-like",
    "agent-sessions",
    "bfcl-multi-turn",
    "resample:PATH",
    "file:PATH",
    "mixed:FRACTION[:BASE]",
)


def default_data_dir() -> Path:
    """`$AUGSERVE_DATA_DIR`, else the copy shipped in the package (`augserve/data`)."""
    env = os.environ.get("AUGSERVE_DATA_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[1] / "data"


def load_trace(path: str | Path) -> Trace:
    """A trace file by extension: `.jsonl` ours, anything else INFERCEPT JSON.
    A missing file raises FileNotFoundError; a directory, or a malformed file, a
    ValueError naming the path."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path}: is a directory, not a trace file (.json or .jsonl)")
    try:
        if path.suffix == ".jsonl":
            return read_jsonl(path)
        return load_infercept(path)
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{path}: not a text trace file (byte {exc.start}: {exc.reason})"
        ) from None


def make_workload(name: str, n: int, seed: int = 0, **kw: Any) -> Trace:
    """The workload `name` with `n` requests (see the module doc for names)."""
    if name.startswith("mixed:"):
        parts = name.split(":", 2)
        try:
            fraction = float(parts[1])
        except ValueError:
            raise ValueError(f"workload {name!r}: FRACTION must be a number") from None
        base = make_workload(parts[2] if len(parts) > 2 else "infercept-like", n, seed, **kw)
        return mix_no_call(base, fraction, seed + 1)
    if name.startswith("resample:"):
        return resample(load_trace(name.split(":", 1)[1]), n, seed)
    if name.startswith("file:"):
        trace = load_trace(name.split(":", 1)[1])
        return trace if n <= 0 else Trace(trace.name, trace.requests[:n])
    data_dir = Path(kw.pop("data_dir", None) or default_data_dir())
    if name == "infercept":
        return resample(load_infercept(data_dir / "infercept" / INFERCEPT_FILE), n, seed)
    if name == "infercept-oneapi":
        return resample(load_infercept(data_dir / "infercept" / INFERCEPT_ONEAPI_FILE), n, seed)
    if name == "infercept-like":
        return infercept_like(n, seed, **kw)
    if name == "toolbench-like":
        return toolbench_like(n, seed)
    if name == "agent-sessions":
        return agent_sessions(n, seed)
    if name == "bfcl-multi-turn":
        return bfcl_multi_turn(n, seed, data_dir)
    raise ValueError(f"workload: unknown name {name!r}; known: {', '.join(WORKLOAD_NAMES)}")
