"""Reference-counted device blocks with cached free blocks evicted LRU."""

from __future__ import annotations

import pytest

from augserve.core.block_pool import BlockPool, OutOfBlocks


def test_shared_block_is_freed_only_by_its_last_holder() -> None:
    dev = BlockPool(4, 0, 16).device
    (b,) = dev.allocate(1)
    dev.cache_block(b, 123)
    dev.touch([b])  # a second request hits it
    assert dev.ref_count[b] == 2
    dev.free([b])
    assert dev.num_free == 3 and dev.num_cached_free == 0
    dev.free([b])
    assert dev.num_free == 4 and dev.num_cached_free == 1  # free, but its KV is kept
    assert dev.cached == {123: b}
    with pytest.raises(RuntimeError, match="freed more often"):
        dev.free([b])


def test_plain_free_blocks_go_first_then_cached_ones_least_recent_first() -> None:
    dev = BlockPool(4, 0, 16).device
    blocks = dev.allocate(3)
    for i, b in enumerate(blocks):
        dev.cache_block(b, 100 + i)
    dev.free(blocks)  # the last block is freed first: evicted first
    (plain,) = dev.allocate(1)
    assert plain not in blocks and len(dev.cached) == 3
    assert dev.allocate(1) == [blocks[2]]
    assert dev.allocate(1) == [blocks[1]]
    assert dev.cached == {100: blocks[0]} and dev.num_evictions == 2


def test_touch_takes_a_cached_free_block_out_of_eviction() -> None:
    dev = BlockPool(2, 0, 16).device
    a, b = dev.allocate(2)
    dev.cache_block(a, 1)
    dev.cache_block(b, 2)
    dev.free([a, b])
    dev.touch([a])  # hit: in use again
    assert dev.allocate(1) == [b]  # only b could be evicted
    with pytest.raises(OutOfBlocks):
        dev.allocate(1)  # a is in use: never evicted
    assert dev.ref_count == [1, 1] and dev.cached == {1: a}


def test_a_duplicate_hash_leaves_the_second_block_uncached() -> None:
    dev = BlockPool(2, 0, 16).device
    a, b = dev.allocate(2)
    dev.cache_block(a, 7)
    dev.cache_block(b, 7)
    dev.free([a, b])
    assert dev.cached == {7: a} and dev.num_cached_free == 1
