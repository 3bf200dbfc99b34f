"""A protocol run split across sessions: each part runs some of the config's repeats
(`bench_tools.py --repeats 0`), and `merge_parts` joins the parts into the one result
file a whole run writes (docs/benchmarking.md, section 2, "A run in parts").

    python benchmarks/vs_vllm/bench_parts.py --config CONFIG --out results.json \\
        part-0.json part-1.json part-2.json

The parts must come from the same config file, byte for byte (its SHA-256 is in each
part), run disjoint repeats and together run every repeat; each keeps its own commit,
date, wall time and engine timings in the merged file's `parts`. Whether to split, and
how, is itself a setting: it belongs in the committed config (`split`) before the
first part runs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_tools_protocol import build_result  # noqa: E402

from augserve.bench import protocol  # noqa: E402

PART_KEEP = ("commit", "date", "wall_s", "repeats_run", "vllm", "augserve", "cpu", "servers")


def config_digest(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def parse_repeats(
    text: str, n: int, split: tuple[tuple[int, ...], ...] | None = None
) -> tuple[int, ...]:
    """'0,2' -> (0, 2): distinct repeat indices below `n`, one of the config's `split`
    parts where it has one; ValueError naming --repeats."""
    try:
        reps = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"--repeats: comma-separated repeat indices, got {text!r}") from None
    if not reps or len(set(reps)) != len(reps) or not all(0 <= r < n for r in reps):
        raise ValueError(f"--repeats: distinct indices in [0, {n - 1}], got {text!r}")
    if split is not None and sorted(reps) not in [sorted(p) for p in split]:
        raise ValueError(f"--repeats: the config splits the run {[list(p) for p in split]}")
    return reps


def part_file(
    config_path: str, repeats: Sequence[int], rows: Sequence[Mapping[str, Any]], **meta: Any
) -> dict[str, Any]:
    """What a part writes: its rows, which repeats it ran, the config's digest."""
    return {
        "part": True, "config": config_path, "config_sha256": config_digest(config_path),
        "repeats_run": list(repeats), "rows": list(rows), **meta,
    }  # fmt: skip


def merge_parts(
    config_path: str, parts: Sequence[Mapping[str, Any]], command: str
) -> dict[str, Any]:
    """The whole run's result file from its parts; ValueError on parts that do not
    make one run (another config, a repeat twice or missing, a row of no repeat)."""
    cfg = protocol.ComparisonConfig.from_dict(json.loads(Path(config_path).read_text()))
    digest = config_digest(config_path)
    seen: list[int] = []
    for i, part in enumerate(parts):
        if not part.get("part"):
            raise ValueError(f"parts[{i}]: not a part file (no 'part': true)")
        if part.get("config_sha256") != digest:
            raise ValueError(f"parts[{i}]: run from another config than {config_path}")
        reps = list(part["repeats_run"])
        if {r["repeat"] for r in part["rows"]} - set(reps):
            raise ValueError(f"parts[{i}]: rows of repeats it says it did not run")
        seen += reps
    if cfg.split is not None:
        want = sorted(sorted(p) for p in cfg.split)
        if sorted(sorted(p["repeats_run"]) for p in parts) != want:
            raise ValueError(f"parts: not the config's split {[list(p) for p in cfg.split]}")
    if sorted(seen) != list(range(len(cfg.seeds))):
        raise ValueError(
            f"parts: repeats run {sorted(seen)}, need each of 0..{len(cfg.seeds) - 1} once"
        )
    _same_machine(parts)
    rows = [r for p in parts for r in p["rows"]]
    commits = sorted({str(p["commit"]) for p in parts})
    return build_result(
        cfg, config_path, command, rows, "+".join(commits),
        parts=[{k: p[k] for k in PART_KEEP if k in p} for p in parts],
        wall_s=round(sum(float(p.get("wall_s", 0.0)) for p in parts), 1),
    )  # fmt: skip


def machine_kind(cpu: Any) -> str:
    """A part's machine kind: the CPU model and flags it recorded, as one string."""
    return json.dumps(cpu, sort_keys=True)


def _same_machine(parts: Sequence[Mapping[str, Any]]) -> None:
    """Every part ran on the same kind of CPU (model and instruction-set flags): the
    machines this project runs on change between sittings (AVX-512 or AVX2 only), and
    a run's repeats must differ only by their seeds."""
    kinds = [machine_kind(p.get("cpu")) for p in parts]
    for i, kind in enumerate(kinds[1:], start=1):
        if kind != kinds[0]:
            raise ValueError(f"parts[{i}]: ran on another CPU ({kind}) than parts[0] "
                             f"({kinds[0]}); a run's parts share one machine kind")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("parts", nargs="+")
    a = p.parse_args()
    parts = [json.loads(Path(x).read_text()) for x in a.parts]
    try:
        result = merge_parts(a.config, parts, " ".join(["python", *sys.argv]))
    except ValueError as exc:
        p.error(str(exc))
    Path(a.out).write_text(json.dumps(result, indent=2))
    print(f"merged {len(parts)} parts into {a.out}")


if __name__ == "__main__":
    main()
