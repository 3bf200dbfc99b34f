"""A learned-predictor directory on disk: `manifest.json` + `heads.joblib`.

The manifest is checked, and the sha256 of the weights compared with it,
before anything is unpickled. Every failure names the path: a missing
directory or file raises `FileNotFoundError`, anything malformed `ValueError`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from augserve.predict.features import FEATURE_VERSION

FORMAT = "augserve-learned-predictor"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
HEADS = "heads.joblib"
HEAD_NAMES = ("bucket", "call", "call_time", "return_len", "pca")


def write_model_dir(path: str | Path, manifest: dict[str, Any], heads: dict[str, Any]) -> Path:
    """Write the heads, then the manifest with their sha256 (updated in place)."""
    import joblib  # type: ignore[import-untyped]

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    joblib.dump({k: heads.get(k) for k in HEAD_NAMES}, out / HEADS)
    manifest["heads"]["sha256"] = _sha256(out / HEADS)
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return out


def read_model_dir(path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(manifest, heads) of a directory written by `write_model_dir`."""
    import joblib

    root = Path(path)
    manifest = _read_manifest(root)
    hpath = root / HEADS
    if not hpath.is_file():
        raise FileNotFoundError(f"learned predictor: {hpath} is missing")
    if _sha256(hpath) != manifest["heads"]["sha256"]:
        raise ValueError(f"learned predictor: {hpath} is corrupt (sha256 does not match manifest)")
    try:
        heads = joblib.load(hpath)
    except Exception as exc:  # unpickling can fail in many ways
        raise ValueError(f"learned predictor: cannot load {hpath}: {exc}") from exc
    if not isinstance(heads, dict) or any(k not in heads for k in HEAD_NAMES):
        raise ValueError(f"learned predictor: {hpath} does not hold the heads {HEAD_NAMES}")
    return manifest, heads


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _read_manifest(root: Path) -> dict[str, Any]:
    if not root.is_dir():
        raise FileNotFoundError(f"learned predictor: no model directory at {root}")
    mpath = root / MANIFEST
    if not mpath.is_file():
        raise FileNotFoundError(f"learned predictor: {mpath} is missing (not a model directory?)")
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"learned predictor: {mpath} is not valid JSON: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"learned predictor: {mpath} is not an {FORMAT} manifest")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"learned predictor: {mpath}: format_version "
            f"{manifest.get('format_version')!r}, this code reads {FORMAT_VERSION}"
        )
    try:
        version = manifest["features"]["version"]
        for key in ("kinds", "embedding"):
            manifest["features"][key]
        int(manifest["n_buckets"])
        manifest["heads"]["sha256"]
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"learned predictor: {mpath} lacks or garbles field {exc}") from exc
    if version != FEATURE_VERSION:
        raise ValueError(
            f"learned predictor: {mpath}: feature version {version!r}, this code "
            f"computes {FEATURE_VERSION}; retrain"
        )
    return manifest
