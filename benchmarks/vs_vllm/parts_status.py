"""Which runs in parts are under way, on which machine kind, and what runs next here.

    python benchmarks/vs_vllm/parts_status.py          # every committed config with a split
    python benchmarks/vs_vllm/parts_status.py --open   # only the runs still to read

A run in parts (docs/benchmarking.md section 2, "A run in parts") may keep one set of
parts per machine kind and is read once, on the first kind whose set is whole. This reads the
committed configs that have a `split` and the committed part files under docs/data
(each names its config and the CPU it ran on) and prints, per config: `read` when a
merged result names it, else each kind's parts in and missing, and the parts this
machine's kind can run next (by `run_parts.sh`, from the commit of the set's first part,
or for a set not started, the commit that added the config). It judges nothing: what
counts as read is a merged file, what counts as a kind is the CPU a part recorded.
No vLLM, no torch.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from bench_parts import machine_kind as kind_key  # noqa: E402
from common import cpu_flags  # noqa: E402

# runs stopped before a reading, and why (a config is never edited after its commit)
ENDED = {
    "benchmarks/configs/vs-vllm-agent-sessions-q1.json": "stopped after part 0: our packer "
    "thrashed there (diagnosed); q2 replaced it (docs/results-vs-vllm.md)",
}


def kind_label(cpu: dict[str, Any]) -> str:
    flags = cpu.get("flags", {})
    isa = "AMX" if flags.get("amx_tile") else "AVX-512" if flags.get("avx512f") else "AVX2-only"
    return f"{cpu.get('model', '?')} ({isa}, {cpu.get('cores', '?')} cores)"


@dataclass
class Run:
    """A config with a split: its parts per machine kind, and whether it was read."""

    config: str  # benchmarks/configs/NAME.json
    repeats: list[int]  # every repeat the split names
    read: str | None = None  # the merged result's path
    ended: str | None = None  # why it stopped unread: a diagnosis, or ENDED
    sets: dict[str, dict[int, str]] = field(default_factory=dict)  # kind -> repeat -> commit
    cpus: dict[str, dict[str, Any]] = field(default_factory=dict)  # kind -> cpu

    def missing(self, kind: str) -> list[int]:
        done = self.sets.get(kind, {})
        return [k for k in self.repeats if k not in done]


def load_runs(configs: Path, data: Path) -> dict[str, Run]:
    """Every config with a split, with the parts and merged results under `data`."""
    runs: dict[str, Run] = {}
    for path in sorted(configs.glob("*.json")):
        cfg = json.loads(path.read_text())
        if cfg.get("split"):
            name = f"benchmarks/configs/{path.name}"
            run = runs[name] = Run(name, sorted(k for part in cfg["split"] for k in part))
            if str(cfg.get("comment", "")).startswith("A diagnosis"):
                run.ended = "a diagnosis: its parts are read one by one, never merged"
            run.ended = ENDED.get(name, run.ended)
    for path in sorted(data.glob("*.json")):
        try:
            blob = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        run = runs.get(blob.get("config")) if isinstance(blob, dict) else None
        if run is None:
            continue
        if "parts" in blob:
            run.read = str(path.relative_to(data.parent.parent))
        elif "repeats_run" in blob and "cpu" in blob:
            kind = kind_key(blob["cpu"])
            run.cpus[kind] = blob["cpu"]
            for k in blob["repeats_run"]:
                run.sets.setdefault(kind, {})[int(k)] = str(blob.get("commit", "?"))
    return runs


def added_in(config: str) -> str:
    """The commit that added `config` (part 0's commit for a set not yet started)."""
    out = subprocess.run(
        ["git", "-C", str(ROOT), "log", "--diff-filter=A", "--format=%h", "--", config],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    lines = out.stdout.split()
    return lines[-1] if lines else "?"


def describe(run: Run, here: str) -> list[str]:
    """Lines for one run: read, or each kind's set, and what runs next on `here`."""
    if run.read:
        return [f"{run.config}: read ({run.read})"]
    if run.ended:
        return [f"{run.config}: ended unread, {run.ended}"]
    lines = [f"{run.config}: {len(run.repeats)} parts, not read"]
    for kind, done in run.sets.items():
        mark = "  <- this machine" if kind == here else ""
        lines.append(f"  {kind_label(run.cpus[kind])}: in {sorted(done)}, "
                     f"missing {run.missing(kind)}{mark}")  # fmt: skip
    for kind in run.sets:
        if not run.missing(kind):
            lines.append(f"  whole on {kind_label(run.cpus[kind])}: read it once now "
                         "(bench_parts.py --config ... --out ... its part files)")  # fmt: skip
            return lines
    todo = run.missing(here)
    if todo:
        done = run.sets.get(here, {})
        commit = next(iter(done.values()), None) or added_in(run.config)
        lines.append(f"  next here: benchmarks/vs_vllm/run_parts.sh {run.config} {commit} "
                     f"OUTDIR {' '.join(map(str, todo))}")  # fmt: skip
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--open", action="store_true", help="only the runs still to read")
    p.add_argument("--configs", type=Path, default=ROOT / "benchmarks" / "configs")
    p.add_argument("--data", type=Path, default=ROOT / "docs" / "data")
    a = p.parse_args()
    here = cpu_flags()
    print(f"this machine: {kind_label(here)}")
    for run in load_runs(a.configs, a.data).values():
        if not (a.open and (run.read or run.ended)):
            print("\n".join(describe(run, kind_key(here))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
