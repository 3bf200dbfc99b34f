"""The embedded default model: built once under the cache folder with a chat template
that knows tools, reused while its recipe holds, rebuilt (and the old one removed)
when the recipe changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from augserve.engine.chat import ChatTemplate
from augserve.engine.chatml import CHATML_TEMPLATE
from augserve.engine.tool_parsers import detect_tool_parser
from augserve.server import default_model as dm


def test_built_once_then_reused_then_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setitem(dm.RECIPE, "preset", "tiny")  # faster to build than "small"
    assert dm.cache_root() == tmp_path / "xdg" / "augserve"
    first = dm.ensure_default_model()
    assert first.parent == dm.cache_root() and first.name == f"default-model-{dm.model_key()}"
    cfg = json.loads((first / "tokenizer_config.json").read_text())
    assert cfg["chat_template"] == CHATML_TEMPLATE
    tpl = ChatTemplate.from_model_dir(first)
    assert detect_tool_parser(tpl.source) == "hermes" and tpl.end_markers() == ("<|im_end|>",)
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert dm.ensure_default_model() == first  # cached: not rebuilt
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp
    monkeypatch.setitem(dm.RECIPE, "seed", 1)  # a new recipe: a new model, the old one goes
    second = dm.ensure_default_model()
    assert second != first and second.is_dir() and not first.exists()
    assert not list(dm.cache_root().glob(".building-*"))
    assert json.loads((second / dm.MARKER).read_text())["seed"] == 1
