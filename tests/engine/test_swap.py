"""Swap out + in moves KV blocks bit-exactly and generation continues unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from augserve.engine.kv_cache import KVCache, KVCacheConfig
from augserve.engine.model_runner import ModelRunner, SeqChunk
from tests.engine.helpers import GREEDY, make_prompts, run_greedy


def _decode(runner: ModelRunner, tokens: list[int], table: list[int], steps: int) -> list[int]:
    """Continue greedy decoding from a fully cached context `tokens`."""
    out: list[int] = []
    toks = list(tokens)
    for _ in range(steps):
        pos = len(toks) - 1
        (tok,) = runner.execute([SeqChunk("s", [toks[-1]], pos, table, True, GREEDY)])
        assert tok is not None
        out.append(tok)
        toks.append(tok)
    return out


def test_swap_roundtrip_bit_identical_and_same_tokens(model_dirs: dict[str, Path]) -> None:
    runner = ModelRunner.from_dir(
        model_dirs["llama_gqa"], "fp32", block_size=4, num_device_blocks=32, num_host_blocks=16
    )
    prompt = make_prompts(1, runner.vocab_size, seed=11)[0][:14]
    table = [3, 7, 9, 12]  # covers 16 positions
    (first,) = runner.execute([SeqChunk("s", prompt, 0, table, True, GREEDY)])
    assert first is not None
    ctx = prompt + [first]
    expected = _decode(runner, ctx, table + [13, 14, 15, 16, 17], 6)
    (first2,) = runner.execute([SeqChunk("s", prompt, 0, table, True, GREEDY)])
    assert first2 == first  # recompute over the same blocks is deterministic
    before = [
        (k[table].clone(), v[table].clone())
        for k, v in zip(runner.kv.k_caches, runner.kv.v_caches, strict=True)
    ]
    runner.swap_out(list(zip(table, [5, 0, 15, 2], strict=True)))
    for k, v in zip(runner.kv.k_caches, runner.kv.v_caches, strict=True):
        k.normal_()
        v.normal_()  # clobber the device cache
    new_table = [20, 1, 30, 4]
    runner.swap_in(list(zip([5, 0, 15, 2], new_table, strict=True)))
    for (k0, v0), k, v in zip(before, runner.kv.k_caches, runner.kv.v_caches, strict=True):
        assert torch.equal(k[new_table], k0) and torch.equal(v[new_table], v0)
    assert _decode(runner, ctx, new_table + [21, 22, 23, 24, 25], 6) == expected


def test_kv_sizing_from_bytes_and_bad_pairs() -> None:
    cfg = KVCacheConfig(block_size=16, kv_cache_memory=1 << 20, num_host_blocks=4)
    cache = KVCache(
        cfg, num_layers=2, kv_heads=2, head_dim=8, dtype=torch.bfloat16, device=torch.device("cpu")
    )
    assert cache.bytes_per_token == 2 * 2 * 2 * 8 * 2
    assert cache.num_device_blocks == (1 << 20) // (cache.bytes_per_token * 16)
    assert cache.k_caches[0].shape == (cache.num_device_blocks, 16, 2, 8)
    assert cache.k_host[0].shape == (4, 16, 2, 8)
    with pytest.raises(ValueError, match="swap_out"):
        cache.swap_out([(0, 4)])
    with pytest.raises(ValueError, match="block_size"):
        KVCacheConfig(block_size=0, num_device_blocks=1)
    with pytest.raises(ValueError, match="exactly one"):
        KVCacheConfig(block_size=16)


def test_runner_properties(model_dirs: dict[str, Path]) -> None:
    r = ModelRunner.from_dir(
        model_dirs["opt"], "fp32", block_size=8, kv_cache_memory=1 << 20, num_host_blocks=3
    )
    assert r.block_size == 8 and r.num_host_blocks == 3
    assert r.kv_bytes_per_token == 2 * 2 * 64 * 4
    assert r.num_device_blocks == (1 << 20) // (r.kv_bytes_per_token * 8)
    assert r.eos_token_ids == (1,)
    prompts = make_prompts(2, r.vocab_size)
    assert len(run_greedy(r, prompts, 3)[1]) == 3
    with pytest.raises(ValueError, match="block_table"):
        r.execute([SeqChunk("x", [1] * 9, 0, [0], True, GREEDY)])


@pytest.mark.parametrize("host_blocks", [[4, 5, 6], [6, 1, 3]], ids=["run", "scattered"])
def test_swap_paths_move_the_right_blocks(host_blocks: list[int]) -> None:
    """Host blocks in one run (copied as they lie) or scattered (through staging)."""
    cfg = KVCacheConfig(block_size=2, num_device_blocks=8, num_host_blocks=8)
    cache = KVCache(cfg, num_layers=2, kv_heads=1, head_dim=4, dtype=torch.float32,
                    device=torch.device("cpu"))  # fmt: skip
    for t in cache.k_caches + cache.v_caches:
        t.copy_(torch.randn_like(t))
    src = [7, 2, 5]
    want = [t[src].clone() for t in cache.k_caches + cache.v_caches]
    cache.swap_out(list(zip(src, host_blocks, strict=True)))
    for host, w in zip(cache.k_host + cache.v_host, want, strict=True):
        assert torch.equal(host[host_blocks], w)
    cache.swap_in(list(zip(host_blocks, [0, 1, 3], strict=True)))
    for dev, w in zip(cache.k_caches + cache.v_caches, want, strict=True):
        assert torch.equal(dev[[0, 1, 3]], w)
