"""Loader errors, tokenizer wrapper and make_model outputs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from augserve.engine.loader import WeightSource
from augserve.engine.make_model import make_model
from augserve.engine.model_runner import ModelRunner
from augserve.engine.tokenizer import IncrementalDetokenizer, Tokenizer


def test_missing_dir_and_config(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nowhere"):
        ModelRunner.from_dir(tmp_path / "nowhere", "fp32")
    with pytest.raises(FileNotFoundError, match="config.json"):
        ModelRunner.from_dir(tmp_path, "fp32")


def test_bad_architecture_and_field(tmp_path: Path, model_dirs: dict[str, Path]) -> None:
    d = tmp_path / "m"
    shutil.copytree(model_dirs["llama_gqa"], d)
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "architectures": ["BertModel"]}))
    with pytest.raises(ValueError, match=r"config.json.*BertModel"):
        ModelRunner.from_dir(d, "fp32")
    (d / "config.json").write_text(
        json.dumps({**cfg, "rope_scaling": {"rope_type": "yarn", "factor": 2.0}})
    )
    with pytest.raises(ValueError, match="yarn"):
        ModelRunner.from_dir(d, "fp32")
    (d / "config.json").write_text(json.dumps({**cfg, "hidden_size": "big"}))
    with pytest.raises(ValueError, match="hidden_size"):
        ModelRunner.from_dir(d, "fp32")
    with pytest.raises(ValueError, match="dtype"):
        ModelRunner.from_dir(d, "int3")


def test_null_head_dim_uses_default(tmp_path: Path, model_dirs: dict[str, Path]) -> None:
    d = tmp_path / "m"
    shutil.copytree(model_dirs["llama_gqa"], d)
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "head_dim": None}))
    assert ModelRunner.from_dir(d, "fp32").model.head_dim == 16


def test_missing_weights(tmp_path: Path, model_dirs: dict[str, Path]) -> None:
    d = tmp_path / "m"
    shutil.copytree(model_dirs["gptj"], d)
    (d / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="safetensors"):
        ModelRunner.from_dir(d, "fp32")


def test_sharded_index(tmp_path: Path, model_dirs: dict[str, Path]) -> None:
    from safetensors.torch import load_file, save_file

    d = tmp_path / "m"
    shutil.copytree(model_dirs["llama_gqa"], d)
    tensors = load_file(str(d / "model.safetensors"))
    (d / "model.safetensors").unlink()
    names = sorted(tensors)
    halves = {
        "model-00001-of-00002.safetensors": names[::2],
        "model-00002-of-00002.safetensors": names[1::2],
    }
    weight_map = {}
    for fname, ns in halves.items():
        save_file({n: tensors[n] for n in ns}, str(d / fname))
        weight_map.update(dict.fromkeys(ns, fname))
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    assert sorted(WeightSource(d).names()) == names
    ref = ModelRunner.from_dir(model_dirs["llama_gqa"], "fp32")
    got = ModelRunner.from_dir(d, "fp32")
    for a, b in zip(ref.model.parameters(), got.model.parameters(), strict=True):
        assert a.equal(b)


def test_tokenizer_roundtrip_and_incremental(model_dirs: dict[str, Path]) -> None:
    tok = Tokenizer(model_dirs["llama_gqa"])
    text = "The tool returns 84, café!"
    ids = tok.encode(text)
    assert ids[0] == tok.bos_token_id == 0
    assert max(ids) < 512 and tok.vocab_size <= 512
    assert tok.decode(ids) == text
    detok = IncrementalDetokenizer(tok)
    pieces = [detok.add([i]) for i in ids[1:]]
    assert "".join(pieces) == text == detok.text
    assert tok.eos_token_ids == (1,)
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}])
    assert chat.endswith("<|assistant|>\n") and "hi" in chat


def test_make_model_validation(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="arch"):
        make_model("bert", "tiny", tmp_path)
    with pytest.raises(ValueError, match="preset"):
        make_model("llama", "huge", tmp_path)
