"""Two tiers driven through the real scheduler: the exact block tables, copies and prefix caches of a scripted run.

The expected values were recorded on the manager before it routed to per-tier objects (`TierKV`) and are
asserted unchanged after: prefix hits, a fork's copy-on-write, swap out and in, on both tiers at once. Then
what the split itself promises: each tier holds its own sequences' tables, and the integrity check says when not.
"""

from __future__ import annotations

import pytest

from runtime.kv.integrity import IntegrityError, check_integrity
from runtime.kv.manager import KVCacheManager, TierSpec
from runtime.sequence import Sequence
from tests.runtime.kv_factories import (
    assert_kv_invariants,
    live_seqs,
    make_child,
    make_scheduler,
    make_seq,
    prefill,
    run_step,
)

TIERS = [TierSpec(16, 2, 12, 12), TierSpec(48, 4, 12, 12)]  # short requests in blocks of 2, long in blocks of 4
SHARED = [3, 1, 4, 1, 5, 9, 2, 6]  # a prefix several prompts start with


def _snapshot(kv: KVCacheManager, live: list[Sequence]) -> tuple:
    """Everything the scenario pins: per live sequence its tier, device table and swap table; per tier the
    prefix cache (hash -> block) and the free queue's order."""
    seqs = sorted((s.seq_id, s.tier, kv.tables.get(s.seq_id), kv.cpu_tables.get(s.seq_id)) for s in live)
    caches = [sorted(pool.cached.values()) for pool in kv.pools]
    return seqs, caches, [list(pool.free_queue) for pool in kv.pools]


def _scripted_run() -> tuple[list, list, KVCacheManager]:
    """Eight steps of admissions on both tiers, a fork at step 3, swap preemption on the long tier."""
    kv = KVCacheManager(TIERS, enable_prefix_caching=True, watermark=0.1)
    sched = make_scheduler(kv, max_num_seqs=6, budget=24, mode="swap")
    prompts = {0: ([*SHARED, 7], 4), 1: ([*SHARED, 8, 8], 3), 2: (SHARED * 3 + [1], 12), 3: (SHARED * 3 + [2], 10),
               4: ([5] * 13, 14)}
    for seq_id, (prompt, max_tokens) in prompts.items():
        tier = kv.tier_for(len(prompt) + max_tokens)
        sched.add(make_seq(prompt, seq_id, tier=tier, arrival=float(seq_id), max_tokens=max_tokens))
    steps, copies = [], []
    for step in range(40):
        if sched.num_unfinished == 0:
            break
        out = run_step(sched, token=10 + step)
        copies.append((out.swap_out, out.swap_in, out.block_copies))
        if step == 2:  # sequence 0 (tier 0, mid-block) gets a sibling sharing its partial tail block
            parent = next(s for s in sched.running if s.seq_id == 0)
            child = make_child(parent, 9)
            kv.fork(parent, child)
            sched.add_running(child)
        steps.append(_snapshot(kv, live_seqs(sched)))
        assert_kv_invariants(kv, live_seqs(sched))
    return steps, copies, kv


# Non-empty (swap out, swap in, block copies) of each step, as (tier, src, dst): step 3 copies the fork's shared
# tail on tier 0; tier 1 swaps sequence 3 out and in until sequence 2 finishes, then sequence 4 in turn.
COPIES = {2: (((1, 0, 0), (1, 7, 1)), (), ()),
          3: ((), ((1, 0, 8), (1, 1, 9)), ((0, 11, 10),)),
          4: (((1, 8, 2), (1, 9, 3)), (), ()),
          5: ((), ((1, 2, 11), (1, 3, 7)), ()),
          6: (((1, 11, 4), (1, 7, 5)), (), ()),
          7: ((), ((1, 4, 9), (1, 5, 8)), ()),
          8: (((1, 9, 6), (1, 8, 7)), (), ()),
          9: ((), ((1, 6, 11), (1, 7, 8)), ()),
          10: (((1, 11, 8), (1, 8, 9)), (), ()),
          11: ((), ((1, 8, 9), (1, 9, 8)), ()),
          12: (((1, 9, 10), (1, 8, 11)), (), ()),
          13: ((), ((1, 10, 11), (1, 11, 8)), ()),
          18: (((1, 4, 0), (1, 3, 1), (1, 2, 2), (1, 1, 3)), (), ()),
          23: ((), ((1, 0, 2), (1, 1, 3), (1, 2, 4), (1, 3, 1)), ())}
# (seq id, tier, device table, swap table) of every live sequence after a few steps.
TABLES = {0: [(0, 0, [0, 1, 2, 3, 4, 10], None), (1, 0, [5, 6, 7, 8, 9, 10], None),
              (2, 1, [0, 1, 2, 3, 4, 5, 6, 10, 7], None), (3, 1, None, None), (4, 1, None, None)],
          2: [(0, 0, [0, 1, 2, 3, 4, 10], None), (2, 1, [0, 1, 2, 3, 4, 5, 6, 10, 7], None), (3, 1, None, [0, 1]),
              (4, 1, None, None), (9, 0, [0, 1, 2, 3, 4, 11], None)],
          3: [(2, 1, [0, 1, 2, 3, 4, 5, 6, 10, 7], None), (3, 1, [8, 9], None), (4, 1, None, None)],
          12: [(3, 1, None, [10, 11]), (4, 1, None, None)],
          13: [(3, 1, [11, 8, 9, 7, 10, 6, 5, 0, 1], None), (4, 1, [4, 3, 2, 1], None)],
          23: [(4, 1, [2, 3, 4, 1, 0, 5, 6], None)]}
# Each tier's prefix cache at the end (chained hash -> block, in registration order) and free queue (LRU first).
CACHES = [{8756109708711196808: 0, 8105778230018119787: 1, -9087660106827763022: 2, 6897749119029039564: 3,
           -6917351312651829337: 9, 5650533282476136809: 4, -5427410378507555831: 10},
          {-6017192146924805963: 7, 7657640326018265824: 10, 2281192610536367039: 2, 5457884308733710437: 3,
           8270726370499072284: 4, -1690722548438537547: 1, 6370969752227336730: 0, -5357232966229343104: 5}]
FREE = [[9, 8, 7, 6, 5, 10, 11, 4, 3, 2, 1, 0], [10, 7, 9, 8, 11, 6, 5, 0, 1, 4, 3, 2]]


def test_a_scripted_two_tier_run_keeps_its_block_ids():
    steps, copies, kv = _scripted_run()
    assert len(steps) == 33
    assert {i: c for i, c in enumerate(copies) if any(c)} == COPIES
    assert {i: steps[i][0] for i in TABLES} == TABLES
    assert [list(pool.cached.items()) for pool in kv.pools] == [list(c.items()) for c in CACHES]
    assert [list(pool.free_queue) for pool in kv.pools] == FREE
    assert steps[-1] == ([], [sorted(c.values()) for c in CACHES], FREE)


def test_each_tier_holds_only_its_sequences_tables():
    kv = KVCacheManager(TIERS, enable_prefix_caching=False, watermark=0.0)
    short, long = make_seq([1, 2, 3], 0, tier=0), make_seq([1] * 20, 1, tier=1)
    prefill(kv, short)
    prefill(kv, long)
    assert [t.tables for t in kv.by_tier] == [{0: [0, 1]}, {1: [0, 1, 2, 3, 4]}]
    assert kv.tables == {0: [0, 1], 1: [0, 1, 2, 3, 4]}  # the view across tiers
    assert [t.pool.num_used for t in kv.by_tier] == [2, 5]
    kv.by_tier[1].tables[0] = kv.by_tier[0].tables.pop(0)  # a planted fault: tier 1 holds tier 0's table
    with pytest.raises(IntegrityError, match="table of sequence 0 \\(tier 0\\) held by tier 1"):
        check_integrity(kv, [short, long])
