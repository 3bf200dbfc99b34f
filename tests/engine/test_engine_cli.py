"""`augserve make-model`, `augserve generate` and `augserve profile` end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from augserve.cli import main
from augserve.core.latency import BatchShape
from augserve.engine.tokenizer import Tokenizer
from augserve.profiles import load_profile


def test_make_model_and_generate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "tiny"
    assert main(["make-model", "--arch", "llama", "--preset", "tiny", "--out", str(model)]) == 0
    assert (model / "config.json").is_file() and (model / "model.safetensors").is_file()
    capsys.readouterr()
    argv = [
        "generate",
        "--model",
        str(model),
        "--prompt",
        "The quick brown fox",
        "--prompt",
        "Hi",
        "--max-tokens",
        "6",
        "--ignore-eos",
        "--dtype",
        "fp32",
        "--threads",
        "1",
        "--json",
    ]
    assert main(argv) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["prompt"] for r in rows] == ["The quick brown fox", "Hi"]
    assert all(len(r["token_ids"]) == 6 and r["finish_reason"] == "length" for r in rows)
    assert main(argv) == 0  # greedy: the same again
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == rows


def test_generate_prints_readable_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The demo: every sampled id is in the tokenizer, the text is what the ids decode to,
    words and not control bytes; the plain output is the prompt followed by that text."""
    model = tmp_path / "small"
    assert main(["make-model", "--preset", "small", "--out", str(model)]) == 0
    capsys.readouterr()
    base = ["generate", "--model", str(model), "--prompt", "Hello", "--max-tokens", "12"]
    base += ["--ignore-eos", "--dtype", "fp32", "--threads", "1", "--num-device-blocks", "8"]
    assert main([*base, "--json"]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    tok = Tokenizer(model)
    assert tok.vocab_size == 4096 and all(0 <= t < 4096 for t in row["token_ids"])
    assert row["text"] == tok.decode(row["token_ids"])
    words = row["text"].split()
    assert len(words) >= 3 and all(w.isprintable() for w in words)
    assert main(base) == 0
    assert capsys.readouterr().out == f"Hello{row['text']}\n"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_generate_on_cuda_without_cuda_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "tiny"
    assert main(["make-model", "--preset", "tiny", "--out", str(model)]) == 0
    capsys.readouterr()
    assert main(["generate", "--model", str(model), "--prompt", "x", "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("augserve: error:")
    assert "CUDA is not available" in err and "'cuda'" in err


def test_generate_reports_a_missing_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["generate", "--model", str(tmp_path / "nope"), "--prompt", "x"]) == 2
    assert "error" in capsys.readouterr().err


def test_profile_writes_a_loadable_fit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "tiny"
    main(["make-model", "--preset", "tiny", "--out", str(model)])
    out = tmp_path / "prof.json"
    argv = [
        "profile",
        "--model",
        str(model),
        "--out",
        str(out),
        "--dtype",
        "fp32",
        "--quick",
        "--threads",
        "1",
        "--num-device-blocks",
        "64",
        "--num-host-blocks",
        "16",
        "--max-batch-tokens",
        "128",
        "--repeats",
        "3",
    ]
    assert main(argv) == 0
    assert "held-out error" in capsys.readouterr().out
    prof = load_profile(out)
    assert prof.kv_bytes == 2 * 2 * 2 * 16 * 4  # layers * (K, V) * kv heads * head dim * fp32
    assert prof.device_kv_bytes == 64 * 16 * prof.kv_bytes
    assert prof.host_kv_bytes == 16 * 16 * prof.kv_bytes
    assert prof.swap_bandwidth > 0 and prof.max_batch_tokens == 128
    data = json.loads(out.read_text())
    assert "held-out error" in data["description"]
    # The fit tracks real iteration times on a busy shared machine only loosely:
    # bigger batches must predict longer iterations, and decode cost grows with context.
    small = prof.iteration_time(BatchShape(decode_reqs=1, decode_context=16))
    big = prof.iteration_time(BatchShape(prefill_tokens=128, prefill_attn=128 * 129 // 2))
    assert 0 < small < big
