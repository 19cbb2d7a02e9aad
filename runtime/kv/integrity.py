"""Integrity check of the KV bookkeeping: ref counts match block tables, nothing leaks.

Runs after every engine test, and after every step when `debug_integrity` is on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from runtime.kv.block_pool import BlockPool
from runtime.kv.manager import KVCacheManager
from runtime.sequence import Sequence


class IntegrityError(AssertionError):
    """The block bookkeeping is inconsistent; the message lists every violation."""


def pool_problems(pool: BlockPool, refs: Counter[int], name: str) -> list[str]:
    """Violations of one pool given the references its tables hold (block id -> count)."""
    problems = []
    metas = pool.meta  # a copy: taken once
    for block_id, meta in enumerate(metas):
        want, free = refs.get(block_id, 0), block_id in pool.free_queue
        if meta.ref_count != want:
            problems.append(f"{name}: block {block_id} ref_count {meta.ref_count} != {want} table refs")
        if (meta.ref_count == 0) != free:
            problems.append(f"{name}: block {block_id} ref_count {meta.ref_count} but free={free}")
    if pool.num_free + sum(1 for m in metas if m.ref_count > 0) != pool.num_blocks:
        problems.append(f"{name}: free {pool.num_free} + used != total {pool.num_blocks}")
    for block_hash, block_id in pool.cached.items():
        if metas[block_id].hash != block_hash:
            problems.append(f"{name}: cached hash of block {block_id} is not findable under its hash")
    hashed = sum(1 for m in metas if m.hash is not None)
    if hashed != len(pool.cached):
        problems.append(f"{name}: {hashed} hashed blocks but {len(pool.cached)} cache entries")
    return problems


def check_integrity(manager: KVCacheManager, live: Iterable[Sequence]) -> None:
    """Raise IntegrityError unless every invariant holds for the sequences still alive (each one's tables
    belong to its tier)."""
    tier_of = {seq.seq_id: seq.tier for seq in live}
    problems = []
    for tier in manager.by_tier:
        for kind, tables in (("table", tier.tables), ("swap table", tier.cpu_tables)):
            problems += [f"leaked {kind} of finished sequence {s}" for s in tables.keys() - tier_of.keys()]
            problems += [f"{kind} of sequence {s} (tier {tier_of[s]}) held by tier {tier.index}"
                         for s in tables.keys() & tier_of.keys() if tier_of[s] != tier.index]
        problems += pool_problems(tier.pool, _refs(tier.tables), f"tier {tier.index}")
        problems += pool_problems(tier.cpu_pool, _refs(tier.cpu_tables), f"tier {tier.index} swap")
    if problems:
        raise IntegrityError("KV integrity check failed:\n  " + "\n  ".join(problems[:20]))


def _refs(tables: dict[int, list[int]]) -> Counter[int]:
    """Block id -> how many tables hold it."""
    return Counter(b for table in tables.values() for b in table)
