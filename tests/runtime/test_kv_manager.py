"""KVCacheManager: prefix hits, chained hashes, fork and copy-on-write, free order, swap, tiers, usage."""

from __future__ import annotations

import pytest

from runtime.kv.block_pool import chain_hash
from runtime.kv.manager import BlockCopy, KVUsage, TierSpec
from tests.runtime.kv_factories import (
    assert_kv_invariants,
    compute,
    make_child,
    make_manager,
    make_seq,
    prefill,
)

A12 = list(range(12))  # three full blocks of 4
H0 = chain_hash(None, (0, 1, 2, 3))
H1 = chain_hash(H0, (4, 5, 6, 7))
H2 = chain_hash(H1, (8, 9, 10, 11))


def _cached_a12():
    """Block size 4, 16 blocks, caching on; sequence 0 holds A12 in blocks [0, 1, 2], all registered."""
    kv = make_manager(block_size=4, num_blocks=16, caching=True)
    a = make_seq(A12, 0)
    prefill(kv, a)
    return kv, a


@pytest.mark.parametrize(("prompt", "hit", "table"), [
    (A12, 8, [0, 1]),  # a full-block prompt still leaves its last token (and block) to compute
    ([*A12, 99], 12, [0, 1, 2]),
    (A12[:11], 8, [0, 1]),
    (A12[:4], 0, []),
    ([*A12[:8], 99, 99, 99, 99, 99], 8, [0, 1]),  # diverges in the third block
])
def test_match_prefix_hits_full_blocks_and_leaves_a_token(prompt, hit, table):
    kv, a = _cached_a12()
    seq = make_seq(prompt, 1)
    assert kv.match_prefix(seq) == hit
    assert kv.block_table(seq) == table
    assert [kv.pools[0].ref_count(b) for b in range(3)] == [1 + (b in table) for b in range(3)]
    assert_kv_invariants(kv, [a, seq])


def test_match_prefix_without_caching_takes_nothing():
    kv = make_manager(block_size=4, num_blocks=16, caching=False)
    prefill(kv, make_seq(A12, 0))
    seq = make_seq(A12, 1)
    assert kv.match_prefix(seq) == 0
    assert seq.seq_id not in kv.tables
    assert kv.pools[0].cached == {}


def test_commit_registers_chained_hashes():
    kv, _ = _cached_a12()
    assert kv.hashes[0] == [H0, H1, H2]
    assert kv.pools[0].cached == {H0: 0, H1: 1, H2: 2}
    other_third = make_seq([*A12[:8], 50, 51, 52, 53, 1], 1)
    assert kv.match_prefix(other_third) == 8
    same_second_other_parent = make_seq([60, 61, 62, 63, 4, 5, 6, 7, 0], 2)
    assert kv.match_prefix(same_second_other_parent) == 0


def test_commit_registers_only_full_computed_blocks():
    kv = make_manager(block_size=4, num_blocks=8, caching=True)
    seq = make_seq(A12, 0)
    compute(kv, seq, 3)
    assert (kv.hashes[0], kv.pools[0].cached) == ([], {})
    compute(kv, seq, 3)  # 6 computed: one full block
    assert (kv.hashes[0], kv.pools[0].cached) == ([H0], {H0: 0})
    compute(kv, seq, 2)
    assert (kv.hashes[0], kv.block_table(seq)) == ([H0, H1], [0, 1])


def test_fork_shares_blocks_and_cow_copies_the_shared_partial_block():
    kv = make_manager(block_size=4, num_blocks=8, caching=True)
    parent = make_seq([1, 2, 3, 4, 5, 6], 0)
    prefill(kv, parent)
    child = make_child(parent, 1)
    kv.fork(parent, child)
    assert kv.tables == {0: [0, 1], 1: [0, 1]}
    assert [kv.pools[0].ref_count(b) for b in (0, 1)] == [2, 2]
    assert kv.hashes[1] == kv.hashes[0] == [chain_hash(None, (1, 2, 3, 4))]

    parent.token_ids.append(7)
    assert kv.blocks_needed(parent, 1) == 1  # no new block, but one copy-on-write
    assert compute(kv, parent, 1) == [BlockCopy(tier=0, src=1, dst=2)]
    assert kv.tables == {0: [0, 2], 1: [0, 1]}
    assert [kv.pools[0].ref_count(b) for b in (0, 1, 2)] == [2, 1, 1]

    child.token_ids.append(8)
    assert kv.blocks_needed(child, 1) == 0
    assert compute(kv, child, 1) == []  # the sibling now owns block 1 alone: writes in place
    assert kv.tables == {0: [0, 2], 1: [0, 1]}
    assert_kv_invariants(kv, [parent, child])


def test_fork_at_a_block_boundary_needs_no_copy():
    kv = make_manager(block_size=4, num_blocks=8)
    parent = make_seq([1, 2, 3, 4], 0)
    prefill(kv, parent)
    child = make_child(parent, 1)
    kv.fork(parent, child)
    parent.token_ids.append(5)
    assert compute(kv, parent, 1) == []
    assert kv.tables == {0: [0, 1], 1: [0]}


def test_free_releases_tail_first_so_the_prefix_is_evicted_last():
    kv = make_manager(block_size=4, num_blocks=4, caching=True)
    a = make_seq(A12, 0)
    prefill(kv, a)
    kv.free(a)
    assert list(kv.pools[0].free_queue) == [3, 2, 1, 0]
    b = make_seq([50] * 8, 1)
    compute(kv, b, 8)
    assert kv.block_table(b) == [3, 2]
    h50 = chain_hash(None, (50,) * 4)
    assert kv.pools[0].cached == {H0: 0, H1: 1, h50: 3, chain_hash(h50, (50,) * 4): 2}
    again = make_seq([*A12, 5], 2)
    assert kv.match_prefix(again) == 8
    assert kv.block_table(again) == [0, 1]
    assert_kv_invariants(kv, [b, again])


def test_swap_out_and_in_round_trip():
    kv = make_manager(block_size=4, num_blocks=4, num_cpu_blocks=4, caching=True)
    a = make_seq([1, 2, 3, 4, 5, 6], 0)
    prefill(kv, a)
    h = chain_hash(None, (1, 2, 3, 4))
    assert kv.can_swap_out(a)
    assert kv.swap_out(a) == [BlockCopy(0, 0, 0), BlockCopy(0, 1, 1)]
    assert (kv.tables, kv.cpu_tables) == ({}, {0: [0, 1]})
    assert list(kv.pools[0].free_queue) == [2, 3, 1, 0]
    assert kv.pools[0].cached == {h: 0}  # the swapped block stays findable until reused
    assert_kv_invariants(kv, [a])

    b = make_seq([9] * 8, 1)
    compute(kv, b, 8)
    assert kv.block_table(b) == [2, 3]
    assert kv.can_swap_in(a)
    assert kv.swap_in(a) == [BlockCopy(0, 0, 1), BlockCopy(0, 1, 0)]  # allocating block 0 evicts h
    assert (kv.tables[0], kv.cpu_tables) == ([1, 0], {})
    assert kv.pools[0].cached[h] == 1  # re-registered on its new block
    assert kv.cpu_pools[0].num_free == 4
    c = make_seq([1, 2, 3, 4, 7], 2)
    assert kv.match_prefix(c) == 4
    assert_kv_invariants(kv, [a, b, c])


def test_can_swap_out_needs_room_in_the_cpu_pool():
    kv = make_manager(block_size=4, num_blocks=4, num_cpu_blocks=1)
    a = make_seq([1, 2, 3, 4, 5], 0)
    prefill(kv, a)
    assert not kv.can_swap_out(a)


@pytest.mark.parametrize(("total_len", "tier"), [(1, 0), (8, 0), (9, 1), (32, 1), (33, None)])
def test_tier_for_boundaries(total_len, tier):
    kv = make_manager(tiers=[TierSpec(8, 2, 8, 0), TierSpec(32, 4, 6, 0)])
    assert kv.tier_for(total_len) == tier


def test_usage_on_two_tiers():
    kv = make_manager(tiers=[TierSpec(8, 2, 8, 0), TierSpec(32, 4, 6, 0)], caching=True)
    a = make_seq([1, 2, 3], 0, tier=0)  # 2 blocks of 2: 1 slot unused
    b = make_seq([1, 2, 3, 4, 5], 1, tier=1)  # 2 blocks of 4: 3 slots unused
    prefill(kv, a)
    prefill(kv, b)
    assert kv.tables == {0: [0, 1], 1: [0, 1]}
    assert kv.usage([a, b]) == KVUsage(used_blocks=4, total_blocks=14, cached_blocks=2, allocated_slots=12,
                                       used_slots=8)
    assert_kv_invariants(kv, [a, b])


def test_usage_counts_a_forked_partial_block_once():
    kv = make_manager(block_size=4, num_blocks=8)
    parent = make_seq([1, 2, 3, 4, 5, 6], 0)
    prefill(kv, parent)
    child = make_child(parent, 1)
    kv.fork(parent, child)
    assert kv.usage([parent, child]).used_slots == 6  # 8 allocated slots, the shared 2-slot tail is empty


def test_watermark_applies_only_when_asked():
    kv = make_manager(block_size=4, num_blocks=10, watermark=0.2)
    assert kv.watermark_blocks == [2]
    eight, nine = make_seq([1] * 32), make_seq([1] * 36)
    assert kv.try_allocate(nine, 36, keep_watermark=True) is None  # 9 blocks would leave 1 of the 2 kept free
    assert kv.try_allocate(eight, 32, keep_watermark=True) == []  # 8 leave exactly the watermark
    kv.free(eight)
    assert kv.try_allocate(nine, 36) == []  # without the watermark all 10 blocks may go


def test_allocate_slots_grows_the_table_by_whole_blocks():
    kv = make_manager(block_size=4, num_blocks=8)
    seq = make_seq(list(range(10)), 0)
    compute(kv, seq, 3)
    assert kv.block_table(seq) == [0]
    compute(kv, seq, 2)
    assert kv.block_table(seq) == [0, 1]
    assert kv.blocks_needed(seq, 5) == 1
    compute(kv, seq, 5)
    assert kv.block_table(seq) == [0, 1, 2]
