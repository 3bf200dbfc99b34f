"""Block accounting: allocation, swap out from the back, swap in in order, budgets."""

import pytest

from augserve.core.block_pool import BlockPool, OutOfBlocks
from augserve.core.request import Request
from augserve.sched.kv_manager import KVCacheManager
from augserve.sched.output import SchedulerOutput


def _kv(device=8, host=8, budget=100) -> tuple[KVCacheManager, SchedulerOutput]:
    kv = KVCacheManager(BlockPool(device, host, block_size=4), budget)
    out = SchedulerOutput(now=0.0)
    kv.begin(out)
    return kv, out


def test_blocks_needed_counts_device_and_host_blocks():
    kv, _ = _kv()
    req = Request("r", 0.0, 10)
    assert kv.blocks_needed(req, 10) == 3  # ceil(10 / 4)
    kv.allocate_slots(req, 3)
    req.num_computed_tokens = 10
    assert kv.blocks_needed(req, 2) == 0  # 12 tokens still fit 3 blocks
    assert kv.blocks_needed(req, 3) == 1
    assert kv.token_capacity(req, 1) == 6  # 4 blocks hold 16 tokens, 10 used


def test_swap_out_moves_whole_blocks_from_the_back_and_swap_in_restores_order():
    kv, out = _kv()
    req = Request("r", 0.0, 16)
    kv.allocate_slots(req, 4)
    original = list(req.block_ids)
    assert kv.swap_out(req, 2) == 2
    assert req.block_ids == original[:2]
    assert [d for d, _ in out.swap_out] == original[2:]
    assert req.host_block_ids == [h for _, h in out.swap_out]
    assert kv.swap_out(req, 5) == 2  # the rest
    assert req.block_ids == [] and len(req.host_block_ids) == 4
    # host order follows context order: the first swapped-out pair is now last
    assert req.host_block_ids[2:] == [h for _, h in out.swap_out[:2]]
    host_in_order = list(req.host_block_ids)
    assert kv.swap_in(req)
    assert [h for h, _ in out.swap_in] == host_in_order
    assert kv.pool.num_free_host == 8 and kv.pool.num_free_device == 4


def test_swap_budget_limits_blocks_per_iteration():
    kv, out = _kv(budget=3)
    req = Request("r", 0.0, 32)
    kv.allocate_slots(req, 8)
    assert kv.swap_out(req, 8) == 3
    assert not kv.can_swap_out()
    kv.begin(SchedulerOutput(now=1.0))
    assert kv.swap_out(req, 8) == 3  # budget refills each iteration
    done = kv.swap_in(req)
    assert not done and len(req.host_block_ids) == 3  # only 3 of 6 back this iteration


def test_swap_out_stops_when_host_is_full_and_discard_frees_everything():
    kv, out = _kv(device=8, host=2)
    req = Request("r", 0.0, 16)
    kv.allocate_slots(req, 4)
    req.num_computed_tokens = 16
    assert kv.swap_out(req, 4) == 2
    assert kv.discard(req) == 2
    assert req.num_computed_tokens == 0 and out.discarded == ["r"]
    assert kv.pool.num_free_device == 8 and kv.pool.num_free_host == 2


def test_pool_rejects_bad_sizes_and_overdraw():
    with pytest.raises(ValueError, match="num_device_blocks"):
        BlockPool(0, 0, 16)
    with pytest.raises(ValueError, match="block_size"):
        BlockPool(4, 0, 0)
    pool = BlockPool(2, 0, 16)
    with pytest.raises(OutOfBlocks):
        pool.device.allocate(3)
