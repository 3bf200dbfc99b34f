"""Finished bench points, one JSON file each, so that a rerun resumes.

`OUT/points/<key>.json` holds `{"key": ..., "rows": [...]}` for one
`BenchPoint`. The key is a hash of everything that decides the point's rows:
the point's fields, the augserve version, the trace file's size and
modification time, and for the engine backend its `AUGSERVE_ENGINE_*`
settings. A file that does not parse, or whose key does not match, is ignored
(the point is computed again). Files are written atomically, so an
interrupted run never leaves a half-written point.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import asdict
from functools import lru_cache
from pathlib import Path
from typing import Any

from augserve import __version__
from augserve.bench.runner import BenchPoint, Row

SUBDIR = "points"


# the source (and data) that decides a simulated point's rows (`code_fingerprint`)
CODE_PATHS = (
    "core",
    "sched",
    "sim",
    "profiles",
    "workload",
    "predict",
    "data",
    "bench/runner.py",
    "bench/reproduce/probes.py",
)


def point_identity(
    point: BenchPoint, env: Mapping[str, str] | None = None, code: bool = False
) -> dict[str, Any]:
    """What decides a point's rows, as plain JSON data. With `code`, also a hash of
    the source that computes it (so a change to the scheduler invalidates the point)
    and the files a learned predictor is loaded from."""
    env = os.environ if env is None else env
    ident: dict[str, Any] = {"point": asdict(point), "version": __version__}
    if point.trace is not None:
        ident["trace_file"] = _fingerprint(point.trace)
    if code:
        ident["code"] = code_fingerprint()
        kind, _, where = point.predictor.partition(":")
        if kind == "learned":
            ident["predictor_files"] = [_fingerprint(str(p)) for p in sorted(Path(where).glob("*"))]
    if point.backend != "sim":
        ident["env"] = {k: v for k, v in sorted(env.items()) if k.startswith("AUGSERVE_ENGINE_")}
    back: dict[str, Any] = json.loads(json.dumps(ident, sort_keys=True))  # tuples -> lists
    return back


def _fingerprint(path: str) -> list[Any]:
    try:
        st = Path(path).stat()
    except OSError:
        return [str(path), None, None]
    return [str(Path(path).resolve()), st.st_size, st.st_mtime_ns]


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """A hash of the files under `CODE_PATHS` (source, profiles, shipped traces)."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for name in CODE_PATHS:
        top = root / name
        for path in sorted(top.rglob("*")) if top.is_dir() else [top]:
            if path.suffix in (".py", ".json") and path.is_file():
                digest.update(str(path.relative_to(root)).encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def point_key(ident: Mapping[str, Any]) -> str:
    blob = json.dumps(ident, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:20]


class PointCache:
    """Read and write finished points under `root/points/`."""

    def __init__(self, root: str | Path, code: bool = False) -> None:
        self.dir = Path(root) / SUBDIR
        self.code = code  # key on the source too (see `point_identity`)

    def _path(self, ident: Mapping[str, Any]) -> Path:
        return self.dir / f"{point_key(ident)}.json"

    def get(self, point: BenchPoint) -> list[Row] | None:
        """The cached rows of `point`, or None when it has not finished before."""
        ident = point_identity(point, code=self.code)
        try:
            payload = json.loads(self._path(ident).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(payload, dict) or payload.get("key") != ident:
            return None
        rows = payload.get("rows")
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            return None
        return rows

    def put(self, point: BenchPoint, rows: list[Row]) -> Path:
        """Store the rows of a finished point (atomically: write, then rename)."""
        ident = point_identity(point, code=self.code)
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self._path(ident)
        text = json.dumps({"key": ident, "rows": rows}, indent=1, default=_jsonable) + "\n"
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path


def _jsonable(value: Any) -> Any:
    if hasattr(value, "value"):  # enums
        return value.value
    raise TypeError(f"not JSON serializable: {type(value).__name__}")
