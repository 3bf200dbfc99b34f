"""The model directory of a GGUF file, under augserve's cache folder.

`gguf_model_dir(FILE.gguf)` writes, once, a small directory holding the
config.json, tokenizer.json, tokenizer_config.json and chat_template.jinja read
from the file's metadata, and `gguf.json`: the file's path and where each tensor
lies in it, which the engine dequantizes when it loads (`loader.open_weights`).
The directory is keyed by the file's path, size and mtime, so an edited file
gets a new one. `docs/models.md`.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from augserve.engine.cache_dir import cache_root

GGUF_POINTER = "gguf.json"
CONVERTER_VERSION = 2  # bump when the files written from a GGUF change


def _key(path: Path, chat_template: str | None) -> str:
    st = path.stat()
    h = hashlib.sha256()
    h.update(json.dumps([str(path), st.st_size, st.st_mtime_ns, CONVERTER_VERSION]).encode())
    h.update((chat_template or "").encode())
    return h.hexdigest()[:16]


def gguf_model_dir(
    path: str | Path, chat_template: str | None = None, root: Path | None = None
) -> Path:
    """The model directory for a GGUF file (written on first use, see the module doc).
    `chat_template` replaces the file's own template."""
    path = Path(path).resolve()
    key = _key(path, chat_template)
    base = (root or cache_root()) / "gguf"
    target = base / f"{path.stem}-{key}"
    return build_once(target, GGUF_POINTER, lambda tmp: write_gguf_dir(path, tmp, chat_template))


def build_once(target: Path, marker: str, build: Callable[[Path], None]) -> Path:
    """`target`, built by `build(tmp)` unless `target/marker` exists. Safe against a
    concurrent builder: each builds in its own temporary directory and renames."""
    if (target / marker).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
    tmp.chmod(0o755)
    try:
        build(tmp)
        try:
            tmp.rename(target)
        except OSError:  # another process finished first
            if not (target / marker).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def write_gguf_dir(path: Path, out: Path, chat_template: str | None = None) -> None:
    """Write the config, tokenizer and chat template of a GGUF file into `out`."""
    from augserve.engine.gguf_loader import GGUFFile, hf_config, tensor_index
    from augserve.engine.gguf_tokenizer import build_tokenizer, tokenizer_config, tokenizer_meta

    g = GGUFFile(path)
    cfg = hf_config(g)
    meta = tokenizer_meta(g.value)
    tok = build_tokenizer(meta, path.name)
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    eos = [meta[k] for k in ("eos_token_id", "eot_token_id") if k in meta]
    gen = {k: cfg[k] for k in ("bos_token_id", "pad_token_id") if k in cfg}
    (out / "generation_config.json").write_text(json.dumps({**gen, "eos_token_id": eos}))
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(meta), indent=2))
    template = chat_template or g.value("tokenizer.chat_template")
    if isinstance(template, str) and template:
        (out / "chat_template.jinja").write_text(template)
    pointer = {"path": str(path), "name": path.name, "architecture": g.arch, **tensor_index(g)}
    (out / GGUF_POINTER).write_text(json.dumps(pointer, indent=2))


def gguf_source(model_dir: str | Path) -> dict[str, Any] | None:
    """`gguf.json` of a directory written by `gguf_model_dir` (the GGUF file's `path` and
    `gguf_loader.tensor_index`), else None."""
    pointer = Path(model_dir) / GGUF_POINTER
    if not pointer.is_file():
        return None
    data: dict[str, Any] = json.loads(pointer.read_text())
    return data
