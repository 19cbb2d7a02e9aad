"""BlockPool: allocation order, LRU free queue, prefix-cache lookups and eviction, exact block ids."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.kv.block_pool import BlockPool, chain_hash


def _allocate_all(pool: BlockPool) -> list[int]:
    return [pool.allocate() for _ in range(pool.num_free)]


def test_allocates_lowest_ids_first_with_ref_one():
    pool = BlockPool(4, enable_caching=False)
    assert [pool.allocate() for _ in range(3)] == [0, 1, 2]
    assert [pool.ref_count(b) for b in range(4)] == [1, 1, 1, 0]
    assert (pool.num_free, pool.num_used) == (1, 3)


def test_release_puts_block_at_mru_end():
    pool = BlockPool(4, enable_caching=False)
    pool.allocate(), pool.allocate()
    pool.release(0)
    assert list(pool.free_queue) == [2, 3, 0]
    assert _allocate_all(pool) == [2, 3, 0]


def test_release_keeps_block_until_last_reference():
    pool = BlockPool(2, enable_caching=False)
    block = pool.allocate()
    pool.acquire(block)  # a fork: no free-queue change
    assert list(pool.free_queue) == [1]
    pool.release(block)
    assert (pool.ref_count(block), list(pool.free_queue)) == (1, [1])
    pool.release(block)
    assert (pool.ref_count(block), list(pool.free_queue)) == (0, [1, 0])
    with pytest.raises(AssertionError, match="block 0 released with ref count 0"):
        pool.release(block)


def test_evicts_cached_free_blocks_in_lru_order():
    pool = BlockPool(4, enable_caching=True)
    _allocate_all(pool)
    for block, h in [(0, 10), (1, 11), (2, 12)]:
        pool.register_many([(block, h, (block,))])
    for block in (1, 0, 2, 3):
        pool.release(block)
    assert pool.cached == {10: 0, 11: 1, 12: 2}  # free but still findable
    assert pool.allocate() == 1
    assert pool.cached == {10: 0, 12: 2}  # 1 evicted
    assert pool.meta[1].hash is None and pool.meta[1].tokens is None
    assert pool.allocate() == 0
    assert pool.cached == {12: 2}
    assert [pool.allocate(), pool.allocate()] == [2, 3]
    assert pool.cached == {}


def test_find_cached_rechecks_tokens_on_a_hash_collision():
    pool = BlockPool(2, enable_caching=True)
    block = pool.allocate()
    pool.register_many([(block, 99, (1, 2))])
    assert pool.find_cached(99, (1, 2)) == 0
    assert pool.find_cached(99, (3, 4)) is None  # same hash, other tokens: a miss
    assert pool.find_cached(98, (1, 2)) is None
    assert pool.ref_count(0) == 1  # lookups have no side effects


def test_acquire_takes_free_cached_block_off_the_queue():
    pool = BlockPool(4, enable_caching=True)
    assert [pool.allocate() for _ in range(3)] == [0, 1, 2]
    pool.register_many([(1, 5, (9,))])
    pool.release(1)
    assert list(pool.free_queue) == [3, 1]
    assert pool.find_cached(5, (9,)) == 1
    pool.acquire(1)
    assert (pool.ref_count(1), list(pool.free_queue), pool.num_used) == (1, [3], 3)
    assert pool.allocate() == 3  # the hit block is not handed out again
    assert pool.cached == {5: 1}  # nothing evicted
    pool.release(1)
    assert (list(pool.free_queue), pool.cached) == ([1], {5: 1})


def test_register_is_idempotent_and_first_block_wins():
    pool = BlockPool(3, enable_caching=True)
    _allocate_all(pool)
    pool.register_many([(0, 7, (1,))])
    pool.register_many([(0, 7, (1,))])
    pool.register_many([(1, 7, (1,))])  # same content computed twice: the cache keeps block 0
    pool.register_many([(0, 8, (2,))])  # a block keeps its first hash
    assert pool.cached == {7: 0}
    assert [(m.hash, m.tokens) for m in pool.meta] == [(7, (1,)), (None, None), (None, None)]


def test_register_is_a_no_op_without_caching():
    pool = BlockPool(2, enable_caching=False)
    pool.register_many([(pool.allocate(), 7, (1,))])
    assert (pool.cached, pool.meta[0].hash, pool.num_cached) == ({}, None, 0)


def test_chain_hash_depends_on_parent():
    first = chain_hash(None, (1, 2))
    assert chain_hash(first, (3, 4)) != chain_hash(chain_hash(None, (5, 6)), (3, 4))
    assert chain_hash(first, (3, 4)) == chain_hash(chain_hash(None, (1, 2)), (3, 4))


def test_chain_hash_is_the_same_in_every_process():
    code = "from runtime.kv.block_pool import chain_hash; print(chain_hash(chain_hash(None, (1, 2)), (3, 4)))"
    root = Path(__file__).resolve().parents[2]
    seen = {subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONPATH": str(root), "PYTHONHASHSEED": seed}).stdout.strip()
            for seed in ("1", "2")}
    assert seen == {str(chain_hash(chain_hash(None, (1, 2)), (3, 4)))}


def test_a_prompts_blocks_are_hashed_once_by_its_identity_as_the_chain_gives_them():
    from runtime.kv import block_pool

    prompt = tuple(range(3, 14))  # 11 tokens: 2 full blocks of 4, 3 left over
    hashes, tokens = block_pool.prompt_blocks(prompt, 4)
    first = chain_hash(None, (3, 4, 5, 6))
    assert tokens == [(3, 4, 5, 6), (7, 8, 9, 10)] and hashes == [first, chain_hash(first, (7, 8, 9, 10))]
    assert block_pool.prompt_blocks(prompt, 4)[0] is hashes  # remembered, not hashed again
    assert block_pool.prompt_blocks(prompt, 8)[1] == [tuple(range(3, 11))]  # per block size
