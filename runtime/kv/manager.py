"""Block tables of every sequence over per-tier KV bookkeeping: picks a request's tier, routes each call to it.

Each tier is a `TierKV` (runtime/kv/tier.py): its device and swap pools, prefix cache and its sequences'
tables. This manager only picks the tier a request fits (`tier_for`) and hands every call on to the
sequence's tier (`seq.tier`); usage is summed over tiers.

The scheduler grows tables with `try_allocate` (the blocks, or None: preempt), and swaps with the
query/action pairs `can_swap_in` then `swap_in`. `TierSpec` and `BlockCopy` are defined with `TierKV` and
imported from here (`__all__`) by the rest of the runtime.

    KVCacheManager.try_allocate(seq, n)  ->  by_tier[seq.tier].try_allocate(seq, n)  ->  its BlockPool
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Sequence as Seq
from typing import NamedTuple

from runtime.kv.block_pool import BlockPool
from runtime.kv.tier import BlockCopy, TierKV, TierSpec
from runtime.sequence import Sequence

__all__ = ["BlockCopy", "KVCacheManager", "KVUsage", "TierSpec"]


class KVUsage(NamedTuple):
    used_blocks: int
    total_blocks: int
    cached_blocks: int  # blocks findable by hash (used or free)
    allocated_slots: int  # used blocks x block size
    used_slots: int  # slots holding a token's KV


class KVCacheManager:
    def __init__(self, tiers: Seq[TierSpec], enable_prefix_caching: bool, watermark: float) -> None:
        self.tiers = tuple(tiers)
        self._max_lens = tuple(t.max_len for t in self.tiers)
        self.total_blocks = sum(t.num_blocks for t in self.tiers)
        self.enable_prefix_caching = enable_prefix_caching
        self.watermark = watermark
        self.reset()

    def reset(self) -> None:
        """Every block free, nothing cached, no tables: as built (the engine's KV tensors are untouched)."""
        self.by_tier = tuple(TierKV(i, spec, self.enable_prefix_caching, self.watermark)
                             for i, spec in enumerate(self.tiers))

    # ---- views across tiers (read-only: the tiers own them) ------------------------------------
    @property
    def pools(self) -> list[BlockPool]:
        return [t.pool for t in self.by_tier]

    @property
    def cpu_pools(self) -> list[BlockPool]:
        return [t.cpu_pool for t in self.by_tier]

    @property
    def watermark_blocks(self) -> list[int]:
        return [t.watermark_blocks for t in self.by_tier]

    @property
    def tables(self) -> dict[int, list[int]]:
        """seq id -> device block ids, of every tier."""
        return {s: table for t in self.by_tier for s, table in t.tables.items()}

    @property
    def hashes(self) -> dict[int, list[int]]:
        """seq id -> chained hashes of its full blocks, of every tier."""
        return {s: hashes for t in self.by_tier for s, hashes in t.hashes.items()}

    @property
    def cpu_tables(self) -> dict[int, list[int]]:
        """seq id -> swap block ids, of every tier."""
        return {s: table for t in self.by_tier for s, table in t.cpu_tables.items()}

    # ---- queries -------------------------------------------------------------------------------
    def tier_for(self, total_len: int) -> int | None:
        """The first tier whose max_len covers a request of `total_len` tokens."""
        for i, limit in enumerate(self._max_lens):  # a loop over ints: every request asks
            if total_len <= limit:
                return i
        return None

    def block_table(self, seq: Sequence) -> list[int]:
        return self.by_tier[seq.tier].tables.get(seq.seq_id, [])

    def blocks_needed(self, seq: Sequence, num_new: int) -> int:
        """New blocks for `num_new` more tokens, plus one if the first lands in a shared partial block."""
        return self.by_tier[seq.tier].blocks_needed(seq, num_new)

    def try_allocate(self, seq: Sequence, num_new: int, keep_watermark: bool = False) -> list[BlockCopy] | None:
        """`allocate_slots` when the blocks are there (beyond the watermark if asked): the copies, or None
        when the caller must preempt."""
        return self.by_tier[seq.tier].try_allocate(seq, num_new, keep_watermark)

    def can_swap_in(self, seq: Sequence, keep_watermark: bool = True) -> bool:
        return self.by_tier[seq.tier].can_swap_in(seq, keep_watermark)

    def can_swap_out(self, seq: Sequence) -> bool:
        return self.by_tier[seq.tier].can_swap_out(seq)

    # ---- actions (each documented on TierKV) ---------------------------------------------------
    def match_prefix(self, seq: Sequence) -> int:
        return self.by_tier[seq.tier].match_prefix(seq)

    def allocate_slots(self, seq: Sequence, num_new: int) -> list[BlockCopy]:
        return self.by_tier[seq.tier].allocate_slots(seq, num_new)

    def commit(self, seq: Sequence) -> None:
        self.by_tier[seq.tier].commit(seq)

    def fork(self, parent: Sequence, child: Sequence) -> None:
        self.by_tier[parent.tier].fork(parent, child)

    def free(self, seq: Sequence) -> None:
        self.by_tier[seq.tier].free(seq)

    def swap_out(self, seq: Sequence) -> list[BlockCopy]:
        return self.by_tier[seq.tier].swap_out(seq)

    def swap_in(self, seq: Sequence) -> list[BlockCopy]:
        return self.by_tier[seq.tier].swap_in(seq)

    def mirror_tables(self, tables: Iterable[tuple[int, int, list[int]]]) -> None:
        """Make these (seq id, tier, device table) the only tables: a rank's copy of rank 0's, for one step's
        sequences (no pool is touched: such a manager only lends its tables to the model runner)."""
        for tier in self.by_tier:
            tier.tables = {}
        for seq_id, tier_index, table in tables:
            self.by_tier[tier_index].tables[seq_id] = table

    # ---- accounting ----------------------------------------------------------------------------
    def usage(self, seqs: Seq[Sequence]) -> KVUsage:
        """Pool-wide usage; waste is the unfilled tail of each live sequence's last block."""
        used = allocated = cached = 0
        for tier in self.by_tier:  # every step asks: one pass over the tiers
            used += tier.pool.num_used
            allocated += tier.pool.num_used * tier.block_size
            cached += tier.pool.num_cached
        tails: dict[tuple[int, int], int] = {}  # (tier, last block) -> its empty slots; forks share a tail
        by_tier = self.by_tier
        for seq in seqs:
            tier = by_tier[seq.tier]
            table = tier.tables.get(seq.seq_id)
            if table:
                empty = len(table) * tier.block_size - seq.num_computed_tokens
                key = (seq.tier, table[-1])
                if empty > 0 and tails.get(key, empty) >= empty:
                    tails[key] = empty
        tail_waste = sum(tails.values())
        return KVUsage(
            used_blocks=used,
            total_blocks=self.total_blocks,
            cached_blocks=cached,
            allocated_slots=allocated,
            used_slots=max(0, allocated - tail_waste),
        )
