"""Factories and invariant helpers for the KV bookkeeping and scheduler tests (no engine, no model)."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable

from runtime.kv.integrity import check_integrity
from runtime.kv.manager import BlockCopy, KVCacheManager, TierSpec
from runtime.outputs import RequestMetrics
from runtime.sampling_params import SamplingParams
from runtime.scheduler import Scheduler, SchedulerOutput
from runtime.sequence import Request, Sequence

_ids = itertools.count(1000)  # seq ids of sequences made without an explicit id


def make_manager(block_size: int = 4, num_blocks: int = 8, num_cpu_blocks: int = 0, caching: bool = False,
                 watermark: float = 0.0, tiers: list[TierSpec] | None = None) -> KVCacheManager:
    """One tier of `num_blocks` blocks (max_len 1024) unless `tiers` is given."""
    tiers = tiers or [TierSpec(1024, block_size, num_blocks, num_cpu_blocks)]
    return KVCacheManager(tiers, enable_prefix_caching=caching, watermark=watermark)


def make_seq(prompt: list[int], seq_id: int | None = None, *, tier: int = 0, arrival: float = 0.0,
             priority: int = 0, max_tokens: int = 16, n: int = 1) -> Sequence:
    """A fresh waiting sequence of its own request (sample index 0)."""
    params = SamplingParams(n=n, max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    seq_id = next(_ids) if seq_id is None else seq_id
    req = Request(f"req-{seq_id}", list(prompt), params, arrival, priority, RequestMetrics(arrival))
    seq = Sequence(seq_id, req, 0, list(prompt), tier, seed=0)
    req.seqs.append(seq)
    return seq


def make_child(parent: Sequence, seq_id: int) -> Sequence:
    """A sibling sample of `parent` at the same point (what the engine's fork builds); blocks not forked yet."""
    child = Sequence(seq_id, parent.request, len(parent.request.seqs), list(parent.token_ids), parent.tier,
                     seed=0, num_computed_tokens=parent.num_computed_tokens, prefix_checked=True)
    parent.request.seqs.append(child)
    return child


def compute(kv: KVCacheManager, seq: Sequence, n: int) -> list[BlockCopy]:
    """Allocate slots for the next `n` uncomputed tokens, mark them computed and commit (one engine step)."""
    copies = kv.allocate_slots(seq, n)
    seq.num_computed_tokens += n
    kv.commit(seq)
    return copies


def prefill(kv: KVCacheManager, seq: Sequence) -> list[BlockCopy]:
    """Prefix match then compute the rest of the prompt, as admission does."""
    seq.num_computed_tokens = kv.match_prefix(seq)
    return compute(kv, seq, seq.num_uncomputed)


def make_scheduler(kv: KVCacheManager, *, max_num_seqs: int = 8, budget: int = 64, chunked: bool = True,
                   mode: str = "recompute", policy: str = "priority") -> Scheduler:
    return Scheduler(kv, max_num_seqs=max_num_seqs, max_num_batched_tokens=budget, chunked_prefill=chunked,
                     preemption_mode=mode, policy=policy)


def live_seqs(sched: Scheduler) -> list[Sequence]:
    return [*sched.waiting, *sched.running, *sched.swapped]


def run_step(sched: Scheduler, token: int = 7) -> SchedulerOutput:
    """schedule(), then the scheduler's side of the engine's postprocess without a model (`update_computed`,
    `update_from_output`); finished sequences leave.

    Every sampled token is `token`. Integrity is checked after the step.
    """
    out = sched.schedule()
    sampling = sched.update_computed(out)
    sched.update_from_output([(seq, token) for seq in sampling], 0.0, _no_stop_strings)
    check_integrity(sched.kv, live_seqs(sched))
    return out


def _no_stop_strings(seq: Sequence) -> bool:
    raise AssertionError("asked for a stop string: no sequence here has any")


def plan(out: SchedulerOutput) -> list[tuple[int, int, int, bool]]:
    """The scheduled items as (seq id, start, num_new_tokens, sample), in order."""
    return [(s.seq.seq_id, s.start, s.num_new_tokens, s.sample) for s in out.scheduled]


def assert_kv_invariants(kv: KVCacheManager, live: Iterable[Sequence]) -> None:
    """An independent restatement of the bookkeeping invariants, then the runtime's own check."""
    live = list(live)
    tier_of = {s.seq_id: s.tier for s in live}
    assert set(kv.tables) <= tier_of.keys() and set(kv.cpu_tables) <= tier_of.keys()
    for tier, (pool, cpu_pool) in enumerate(zip(kv.pools, kv.cpu_pools)):
        refs = Counter(b for s, t in kv.tables.items() if tier_of[s] == tier for b in t)
        cpu_refs = Counter(b for s, t in kv.cpu_tables.items() if tier_of[s] == tier for b in t)
        for p, want in ((pool, refs), (cpu_pool, cpu_refs)):
            assert [m.ref_count for m in p.meta] == [want.get(b, 0) for b in range(p.num_blocks)]
            used = {b for b in range(p.num_blocks) if p.refs[b] > 0}
            assert not used & set(p.free_queue)
            assert len(used) + p.num_free == p.num_blocks
        for block_hash, block_id in pool.cached.items():
            assert pool.find_cached(block_hash, pool.tokens[block_id]) == block_id
    check_integrity(kv, live)
