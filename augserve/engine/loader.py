"""Read a Hugging Face model directory from local disk: config and safetensors weights."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

INDEX_FILE = "model.safetensors.index.json"


def load_json(path: Path) -> dict[str, Any]:
    """Read a JSON object, naming the path on any failure."""
    if not path.is_file():
        raise FileNotFoundError(f"missing file: {path}")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON: {e}") from e
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object")
    return data


def load_config(model_dir: str | Path) -> dict[str, Any]:
    """config.json of a model dir (FileNotFoundError naming the path if absent)."""
    d = Path(model_dir)
    if not d.is_dir():
        raise FileNotFoundError(f"model directory not found: {d}")
    return load_json(d / "config.json")


def load_optional_json(path: Path) -> dict[str, Any]:
    return load_json(path) if path.is_file() else {}


class WeightSource:
    """Lazy access to tensors by Hugging Face name across (sharded) safetensors files."""

    def __init__(self, model_dir: str | Path) -> None:
        d = Path(model_dir)
        index = d / INDEX_FILE
        if index.is_file():
            weight_map = load_json(index).get("weight_map")
            if not isinstance(weight_map, dict):
                raise ValueError(f"{index} has no 'weight_map' object")
            self._file_of = {k: d / v for k, v in weight_map.items()}
        else:
            files = sorted(d.glob("*.safetensors"))
            if not files:
                raise FileNotFoundError(f"no *.safetensors files in {d}")
            self._file_of = {}
            for f in files:
                with safe_open(str(f), framework="pt") as h:
                    for k in h.keys():  # noqa: SIM118 - safe_open has no __iter__
                        self._file_of[k] = f
        self._handles: dict[Path, Any] = {}
        self.model_dir = d

    def names(self) -> list[str]:
        return list(self._file_of)

    def has(self, name: str) -> bool:
        return name in self._file_of

    def get(self, name: str) -> torch.Tensor:
        """Tensor by name; ValueError naming the directory if absent."""
        f = self._file_of.get(name)
        if f is None:
            raise ValueError(f"weight {name!r} not found in {self.model_dir}")
        if f not in self._handles:
            if not f.is_file():
                raise FileNotFoundError(f"missing weight shard: {f}")
            self._handles[f] = safe_open(str(f), framework="pt")
        tensor: torch.Tensor = self._handles[f].get_tensor(name)
        return tensor

    def first(self, *names: str) -> torch.Tensor:
        """The first of `names` present (for checkpoints with varying prefixes)."""
        for n in names:
            if self.has(n):
                return self.get(n)
        raise ValueError(f"none of the weights {names} found in {self.model_dir}")

    def close(self) -> None:
        self._handles.clear()


def open_weights(model_dir: str | Path) -> WeightSource | Any:
    """The weights of a model directory: its safetensors, or the GGUF file it stands for
    (a directory written by `resolve.gguf_model_dir`)."""
    from augserve.engine.gguf_dir import gguf_source

    source = gguf_source(model_dir)
    if source is None:
        return WeightSource(model_dir)
    from augserve.engine.gguf_loader import GGUFWeights

    return GGUFWeights(source["path"], index=source)
