"""Memory: a drained engine holds no blocks and no state; KV is allocated once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from augserve.core.config import SchedulerConfig
from augserve.core.request import Segment
from augserve.engine.engine import LLMEngine
from augserve.engine.make_model import make_model
from augserve.engine.model_runner import ModelRunner
from augserve.engine.sampling_params import SamplingParams
from augserve.sched.invariants import check_invariants

PARAMS = SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=64)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> LLMEngine:
    path = make_model("llama", "tiny", tmp_path_factory.mktemp("mem") / "m", seed=2)
    runner = ModelRunner.from_dir(
        path, "fp32", block_size=4, num_device_blocks=40, num_host_blocks=24
    )
    config = SchedulerConfig(policy="augserve", max_batch_tokens=32, swap_budget_blocks=4)
    return LLMEngine(runner, config)


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def storage(engine: LLMEngine) -> list[tuple[int, tuple[int, ...]]]:
    kv = engine.runner.kv
    return [
        (t.data_ptr(), tuple(t.shape)) for t in kv.k_caches + kv.v_caches + kv.k_host + kv.v_host
    ]


def plan(i: int) -> list[Segment]:
    if i % 3 == 0:
        return [Segment(4 + i % 5)]
    return [Segment(3 + i % 4, call_time=0.02 + 0.01 * (i % 7), return_len=2 + i % 5), Segment(5)]


def tick(engine: LLMEngine, now: float, returns: dict[str, tuple[float, list[int]]]) -> int:
    """Resume due calls, run one step, start its calls; returns requests finished."""
    for rid, (t, ids) in list(returns.items()):
        if t <= now:
            del returns[rid]
            engine.resume(rid, ids, now=now)
    step = engine.step(now)
    check_invariants(engine.scheduler, step.scheduled)
    for call in step.calls:
        assert call.scripted is not None
        returns[call.request_id] = (now + call.scripted.duration, list(call.scripted.token_ids))
    return len(step.finished)


def test_drain_frees_everything_and_kv_is_allocated_once(engine: LLMEngine) -> None:
    before = storage(engine)
    now, started, finished, rss = 0.0, 0, 0, []
    returns: dict[str, tuple[float, list[int]]] = {}
    for it in range(1000):
        if engine.scheduler.num_live < 6:
            prompt = [3 + (started * 31 + j * 7) % 500 for j in range(5 + started % 17)]
            engine.add_request(f"r{started}", prompt, PARAMS, plan(started), now=now)
            started += 1
        finished += tick(engine, now, returns)
        now += 0.01
        if it in (200, 999):
            rss.append(rss_bytes())
    assert storage(engine) == before  # no reallocation of the KV cache
    assert rss[1] - rss[0] < 32 * 2**20  # roughly flat
    for _ in range(2000):  # drain
        if not engine.has_unfinished():
            break
        finished += tick(engine, now, returns)
        now += 0.01
    assert finished == started > 50
    stats = engine.stats()
    assert stats.device_blocks_used == 0 and stats.host_blocks_used == 0
    assert engine.scheduler.num_live == 0 and not engine.scheduler.kv.reclaimable
    assert not engine.has_unfinished()
    assert any(bool(torch.count_nonzero(t)) for t in engine.runner.kv.k_host)  # swaps happened


def test_cpu_kv_cache_is_resident_only_where_written() -> None:
    """A CPU cache is calloc'd (kv_cache.zeros): 512 MiB of it cost no resident memory
    until written, read as zeros, and a written block costs its own pages only."""
    from augserve.engine.kv_cache import KVCache, KVCacheConfig

    before = rss_bytes()
    kv = KVCache(KVCacheConfig(16, 512), 8, 8, 128, torch.float32, torch.device("cpu"))
    assert sum(t.numel() * 4 for t in kv.k_caches + kv.v_caches) == 512 * 2**20
    assert rss_bytes() - before < 32 * 2**20
    assert not kv.k_caches[3][100:200].any()  # zeros (read: the kernel's zero page)
    kv.k_caches[0][:256].fill_(1.0)  # 256 blocks of 64 KiB: 16 MiB written
    grown = rss_bytes() - before
    assert 16 * 2**20 <= grown < 64 * 2**20, grown


@pytest.mark.parametrize("arch", ["llama", "opt", "gptj"])
def test_building_and_running_a_model_imports_no_compiler(
    arch: str, tmp_path: pytest.TempPathFactory
) -> None:
    """A model built (on the meta device, then loaded) and run eagerly never imports
    torch._dynamo (nor sympy or triton under it: ~100 MB resident): in a fresh process,
    since other tests compile."""
    import subprocess
    import sys

    path = make_model(arch, "tiny", tmp_path / "m", seed=1)  # type: ignore[operator]
    code = (
        "import sys\n"
        "from augserve.engine.model_runner import ModelRunner, SeqChunk\n"
        "from augserve.engine.sampling_params import SamplingParams\n"
        f"r = ModelRunner.from_dir({str(path)!r}, 'fp32', block_size=4, num_device_blocks=8)\n"
        "g = SamplingParams(temperature=0.0)\n"
        "r.execute([SeqChunk('a', [5, 6, 7], 0, [0, 1], True, g)])\n"
        "r.execute([SeqChunk('a', [8], 3, [0, 1], True, g)])\n"
        "print(sorted(m for m in ('torch._dynamo', 'sympy', 'triton') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, check=True)  # fmt: skip
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stderr[-2000:]


def test_an_engine_loads_its_vocabulary_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 150k vocabulary is ~45 MB resident once loaded, and the allocator may keep a
    freed copy: the tokenizer reads its EOS ids with itself, and the runner reads none
    while an engine has a tokenizer. Without one, the runner still finds them."""
    from tokenizers import Tokenizer as HFTokenizer

    from augserve.engine import tokenizer as tok_mod
    from augserve.engine.builder import EngineArgs, build_engine

    path = make_model("llama", "tiny", tmp_path / "m", seed=3)
    cfg = json.loads((path / "tokenizer_config.json").read_text())
    assert cfg.get("eos_token")  # the lookup by text runs
    loads: list[str] = []

    class Counted:
        @staticmethod
        def from_file(file: str) -> HFTokenizer:
            loads.append(file)
            return HFTokenizer.from_file(file)

    monkeypatch.setattr(tok_mod, "HFTokenizer", Counted)
    engine = build_engine(EngineArgs(model=str(path), dtype="fp32", num_device_blocks=16))
    assert len(loads) == 1
    assert engine.tokenizer is not None
    want = engine.tokenizer.eos_token_ids
    assert engine.eos_token_ids == frozenset(want) and want
    assert engine.runner.eos_token_ids == want and len(loads) == 2  # read when asked
