"""CUDA graphs for decode steps: the buckets (anywhere) and greedy parity (CUDA only)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from augserve.engine.cuda_graphs import batch_bucket, width_bucket
from augserve.engine.kv_cache import KVCacheConfig
from augserve.engine.make_model import make_model
from augserve.engine.model_runner import ModelRunner
from augserve.engine.runner_config import RunnerConfig
from tests.engine.helpers import hf_greedy, make_prompts, run_greedy


def test_buckets_round_up_and_refuse_what_was_not_captured() -> None:
    assert [batch_bucket(n, 64) for n in (1, 2, 3, 5, 8, 9, 16, 17, 64)] == [
        1, 2, 4, 8, 8, 16, 16, 32, 64,
    ]  # fmt: skip
    assert batch_bucket(65, 64) is None and batch_bucket(3, 2) is None
    assert [width_bucket(w, 128) for w in (1, 2, 3, 5, 64, 65, 128)] == [
        2, 2, 4, 8, 64, 128, 128,
    ]  # fmt: skip
    assert width_bucket(100, 96) is None and width_bucket(90, 96) == 96


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA GPU")
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_graphs_give_the_eager_greedy_ids(tmp_path: Path, dtype: str) -> None:
    """Batches that grow and shrink (staggered joins, chunked prefills between the
    decode steps), through graphs and without: the same greedy ids; fp32 also HF's."""
    d = make_model("llama", "tiny", tmp_path / "m", seed=3, untied=True)
    kv = KVCacheConfig(block_size=8, num_device_blocks=128)
    on, off = (
        ModelRunner(RunnerConfig(str(d), dtype, "cuda", kv, cuda_graphs=g)) for g in (True, False)
    )
    assert on._graphs is not None and off._graphs is None
    prompts = make_prompts(5, on.vocab_size, seed=4)
    got = run_greedy(on, prompts, 40, chunk=7, stagger=3)
    assert len(on._graphs.graphs) >= 3  # several batch sizes were captured and replayed
    assert got == run_greedy(off, prompts, 40, chunk=7, stagger=3)
    if dtype == "fp32":
        assert got == [hf_greedy(d, p, 40) for p in prompts]


def test_graphs_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    from augserve.engine.ops import cuda_graphs_wanted

    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert cuda_graphs_wanted(None, cuda) and not cuda_graphs_wanted(None, cpu)
    assert not cuda_graphs_wanted(True, cpu) and not cuda_graphs_wanted(False, cuda)
    monkeypatch.setenv("AUGSERVE_CUDA_GRAPHS", "0")
    assert not cuda_graphs_wanted(None, cuda) and cuda_graphs_wanted(True, cuda)
    monkeypatch.setenv("AUGSERVE_CUDA_GRAPHS", "yes")
    with pytest.raises(ValueError, match="AUGSERVE_CUDA_GRAPHS"):
        cuda_graphs_wanted(None, cuda)
