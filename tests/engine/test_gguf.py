"""GGUF files load in the engine: weights (llama.cpp's Q/K permutation undone, quantized
types dequantized), config, tokenizer and chat template from the file, through
`resolve_model` as every `--model` takes it; unsupported files get one line naming
what is not supported. The files are written here from random make_model dirs the way
llama.cpp's converter writes them (tests/engine/gguf_helpers.py): no download."""

from __future__ import annotations

import os
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch

from augserve.cli import main
from augserve.engine.chat import ChatTemplate
from augserve.engine.gguf_loader import GGUFWeights, reverse_permute
from augserve.engine.kv_cache import KVCacheConfig
from augserve.engine.make_model import make_model
from augserve.engine.model_runner import ModelRunner
from augserve.engine.resolve import resolve_model
from augserve.engine.runner_config import RunnerConfig
from augserve.engine.tokenizer import Tokenizer
from tests.engine.gguf_helpers import permute, write_gguf
from tests.engine.helpers import run_greedy

TEMPLATE = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}[assistant]"


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gguf")
    return {
        "llama": make_model("llama", "tiny", root / "llama", seed=3, untied=True),
        "qwen2": make_model("qwen2", "tiny", root / "qwen2", seed=4, untied=True),
    }


def _runner(model: str) -> ModelRunner:
    kv = KVCacheConfig(block_size=8, num_device_blocks=64)
    return ModelRunner(RunnerConfig(model, "fp32", "cpu", kv, compile=False, prepack=False))


def test_reverse_permute_undoes_llama_cpp_permute() -> None:
    rng = np.random.default_rng(0)
    for heads, shape in ((4, (64, 24)), (2, (32, 24)), (4, (64,))):
        w = rng.standard_normal(shape).astype(np.float32)
        p = permute(w, heads)
        assert not np.array_equal(p, w)
        assert np.array_equal(reverse_permute(p, heads), w)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_f32_gguf_loads_the_same_model(dirs: dict[str, Path], tmp_path: Path, arch: str) -> None:
    f = write_gguf(dirs[arch], tmp_path / f"{arch}.gguf", arch=arch)
    model = resolve_model(f)
    assert Path(model).is_dir() and Path(model) != dirs[arch]
    ref, got = _runner(str(dirs[arch])), _runner(model)
    want = dict(ref.model.named_parameters())
    for name, p in got.model.named_parameters():
        assert torch.equal(p, want[name]), name
    prompts = [[5, 17, 42, 99, 7], [300, 301], list(range(40, 70))]
    assert run_greedy(got, prompts, 12) == run_greedy(ref, prompts, 12)


def test_quantized_gguf_is_dequantized_at_load(dirs: dict[str, Path], tmp_path: Path) -> None:
    q8 = gguf.GGMLQuantizationType.Q8_0
    f = write_gguf(dirs["llama"], tmp_path / "q8.gguf", qtype=q8)
    weights = GGUFWeights(f, progress=False)
    ref = _runner(str(dirs["llama"]))
    q = weights.get("model.layers.0.self_attn.q_proj.weight")
    want = ref.model.state_dict()
    wq = next(v for k, v in want.items() if "layers.0" in k and "qkv" in k)[: q.shape[0]]
    assert q.dtype == torch.float32 and q.shape == wq.shape
    err = (q - wq).abs().max().item()
    assert 0 < err < 0.02 * wq.abs().max().item()  # Q8_0's rounding, not a shuffle
    r = _runner(resolve_model(f))
    out = run_greedy(r, [[5, 17, 42, 99, 7]], 8)
    assert len(out[0]) == 8 and all(0 <= t < r.vocab_size for t in out[0])


def test_tokenizer_and_chat_template_come_from_the_file(
    dirs: dict[str, Path], tmp_path: Path
) -> None:
    f = write_gguf(dirs["llama"], tmp_path / "t.gguf", chat_template=TEMPLATE)
    model = resolve_model(f)
    ours, ref = Tokenizer(model), Tokenizer(dirs["llama"])
    texts = ["The quick brown fox", "What is the capital of France? Paris!", "  12 x 7 = 84\n"]
    for text in texts:
        assert ours.encode(text) == ref.encode(text)
        assert ours.decode(ours.encode(text)) == text
    assert (ours.bos_token_id, ours.eos_token_ids, ours.add_bos) == (0, (1,), True)
    assert ours.encode("</s>", add_special_tokens=False) == [1]  # a special token stays whole
    assert ChatTemplate.from_model_dir(model).source == TEMPLATE
    msgs = [{"role": "user", "content": "hi"}]
    assert ours.apply_chat_template(msgs) == "[user] hi\n[assistant]"
    assert resolve_model(f) == model  # cached
    os.utime(f, ns=(1, 1))
    assert resolve_model(f) != model  # an edited file gets a new directory


def _write_minimal(path: Path, arch: str, tensor: np.ndarray) -> Path:
    w = gguf.GGUFWriter(str(path), arch)
    w.add_tensor("token_embd.weight", tensor)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_unsupported_architecture_and_type_get_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f32 = np.zeros((4, 8), dtype=np.float32)
    mamba = _write_minimal(tmp_path / "m.gguf", "mamba", f32)
    with pytest.raises(ValueError, match="architecture 'mamba' is not supported") as e:
        resolve_model(mamba)
    assert "\n" not in str(e.value)
    ints = _write_minimal(tmp_path / "i.gguf", "llama", np.zeros((4, 8), dtype=np.int32))
    with pytest.raises(ValueError, match="tensor type I32"):
        resolve_model(ints)
    assert main(["generate", "--model", str(mamba), "--prompt", "hi"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("augserve: error:") and "mamba" in err and "\n" not in err
    with pytest.raises(ValueError, match="GGUF file not found"):
        resolve_model(tmp_path / "absent.gguf")
    with pytest.raises(ValueError, match="not a model directory, a .gguf file"):
        resolve_model(tmp_path / "nothing-here")


def test_sentencepiece_tokenizer_from_metadata() -> None:
    """tokenizer.ggml.model 'llama' (Llama 2, Mistral): BPE merges recovered from the
    scores, '▁' for spaces, bytes the vocabulary lacks as <0xNN> tokens."""
    from augserve.engine.gguf_tokenizer import build_tokenizer, tokenizer_config

    ranked = ["he", "ll", "llo", "hello", "▁hello", "or", "wor", "ld", "world", "▁world"]
    chars = ["▁", "h", "e", "l", "o", "w", "r", "d"]
    tokens = ["<unk>", "<s>", "</s>", *[f"<0x{b:02X}>" for b in range(256)], *chars, *ranked]
    scores = [0.0] * (3 + 256) + [-100.0] * len(chars) + [-10.0 - i for i in range(len(ranked))]
    types = [2, 3, 3] + [6] * 256 + [1] * (len(chars) + len(ranked))
    meta = {"model": "llama", "tokens": tokens, "scores": scores, "token_type": types,
            "unknown_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}  # fmt: skip
    tok = build_tokenizer(meta)
    enc = tok.encode("hello world")
    assert enc.tokens == ["▁hello", "▁world"]
    assert tok.decode(enc.ids) == "hello world"
    odd = tok.encode("hi!")  # 'i' and '!' are not in the vocabulary: byte fallback
    assert odd.tokens == ["▁", "h", "<0x69>", "<0x21>"] and tok.decode(odd.ids) == "hi!"
    cfg = tokenizer_config(meta)
    assert (cfg["bos_token"], cfg["eos_token"], cfg["add_bos_token"]) == ("<s>", "</s>", True)
    with pytest.raises(ValueError, match="tokenizer model 'bert' is not supported"):
        build_tokenizer({**meta, "model": "bert"})
