"""Block tables of every sequence over per-tier block pools: allocation, prefix hits, fork, COW, swap.

The scheduler grows tables with `try_allocate` (the blocks, or None: preempt), and swaps with the
query/action pairs `can_swap_in` then `swap_in`. A sequence's table always covers exactly the
tokens whose KV is (or is being) written:

    token:  0 1 2 3 | 4 5 6 7 | 8 9 .          block_size 4, 10 tokens computed
    table:  [ 12    ,  3      ,  40 ]          ceil(10 / 4) = 3 blocks; slot of token 9 = 40*4 + 1
"""

from __future__ import annotations

from collections.abc import Sequence as Seq
from typing import NamedTuple

from runtime.kv.block_pool import BlockPool, chain_hash
from runtime.sequence import Sequence


class TierSpec(NamedTuple):
    max_len: int  # requests with prompt + max_tokens up to this use the tier
    block_size: int
    num_blocks: int  # device blocks
    num_cpu_blocks: int  # swap blocks

    @property
    def table_blocks(self) -> int:
        """Block-table columns of the longest request of the tier."""
        return -(-self.max_len // self.block_size)

    @property
    def max_context(self) -> int:
        """The longest context a block table of this tier can hold, in tokens: what decode attention sizes its
        split-KV partitions by, in every path (eager, piecewise, CUDA graphs), so they split alike."""
        return self.table_blocks * self.block_size


class BlockCopy(NamedTuple):
    tier: int
    src: int
    dst: int


class KVUsage(NamedTuple):
    used_blocks: int
    total_blocks: int
    cached_blocks: int  # blocks findable by hash (used or free)
    allocated_slots: int  # used blocks x block size
    used_slots: int  # slots holding a token's KV


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class KVCacheManager:
    def __init__(self, tiers: Seq[TierSpec], enable_prefix_caching: bool, watermark: float) -> None:
        self.tiers = tuple(tiers)
        self.block_sizes = [t.block_size for t in self.tiers]
        self.total_blocks = sum(t.num_blocks for t in self.tiers)
        self.watermark_blocks = [int(watermark * t.num_blocks) for t in self.tiers]
        self.enable_prefix_caching = enable_prefix_caching
        self.reset()

    def reset(self) -> None:
        """Every block free, nothing cached, no tables: as built (the engine's KV tensors are untouched)."""
        self.pools = [BlockPool(t.num_blocks, self.enable_prefix_caching) for t in self.tiers]
        self.cpu_pools = [BlockPool(t.num_cpu_blocks, False) for t in self.tiers]
        self.tables: dict[int, list[int]] = {}  # seq id -> device block ids
        self.hashes: dict[int, list[int]] = {}  # seq id -> chained hashes of its full blocks
        self.cpu_tables: dict[int, list[int]] = {}  # seq id -> swap block ids

    # ---- queries -------------------------------------------------------------------------------
    def tier_for(self, total_len: int) -> int | None:
        """The first tier whose max_len covers a request of `total_len` tokens."""
        return next((i for i, t in enumerate(self.tiers) if total_len <= t.max_len), None)

    def block_table(self, seq: Sequence) -> list[int]:
        return self.tables.get(seq.seq_id, [])

    def _needs_cow(self, seq: Sequence) -> bool:
        """Writing the next token would land in a partly filled block that is shared (a fork's tail)."""
        bs = self.tiers[seq.tier].block_size
        computed = seq.num_computed_tokens
        if computed % bs == 0:  # the next token opens a new block: nothing to copy
            return False
        table = self.tables[seq.seq_id]
        return self.pools[seq.tier].meta[table[computed // bs]].ref_count > 1

    def blocks_needed(self, seq: Sequence, num_new: int) -> int:
        """New blocks for `num_new` more tokens, plus one if the first lands in a shared partial block.

        On the hot path (every running sequence, every step): written without helper calls.
        """
        bs = self.tiers[seq.tier].block_size
        computed = seq.num_computed_tokens
        table = self.tables.get(seq.seq_id)
        grow = -(-(computed + num_new) // bs) - (len(table) if table else 0)
        # Copy-on-write only when writing into a partly filled block that is shared (a fork's tail).
        cow = computed % bs != 0 and self.pools[seq.tier].meta[table[computed // bs]].ref_count > 1
        return max(0, grow) + cow

    def try_allocate(self, seq: Sequence, num_new: int, keep_watermark: bool = False) -> list[BlockCopy] | None:
        """`allocate_slots` when the blocks are there (beyond the watermark if asked): the copies, or None
        when the caller must preempt."""
        need = self.blocks_needed(seq, num_new)
        if need == 0:
            return []
        reserve = self.watermark_blocks[seq.tier] if keep_watermark else 0
        if need > self.pools[seq.tier].num_free - reserve:
            return None
        return self.allocate_slots(seq, num_new)

    def can_swap_in(self, seq: Sequence, keep_watermark: bool = True) -> bool:
        reserve = self.watermark_blocks[seq.tier] if keep_watermark else 0
        return len(self.cpu_tables[seq.seq_id]) <= self.pools[seq.tier].num_free - reserve

    def can_swap_out(self, seq: Sequence) -> bool:
        return len(self.tables.get(seq.seq_id, [])) <= self.cpu_pools[seq.tier].num_free

    # ---- actions -------------------------------------------------------------------------------
    def match_prefix(self, seq: Sequence) -> int:
        """Take the longest cached run of the prompt's full blocks; return how many tokens it covers.

        At least one prompt token is always left to compute, since its logits give the first token.
        """
        assert seq.seq_id not in self.tables, "match_prefix on a sequence that already holds blocks"
        if not self.enable_prefix_caching:
            return 0
        pool, bs = self.pools[seq.tier], self.tiers[seq.tier].block_size
        table: list[int] = []
        hashes: list[int] = []
        parent: int | None = None
        for i in range((seq.num_prompt_tokens - 1) // bs):
            tokens = tuple(seq.token_ids[i * bs : (i + 1) * bs])
            parent = chain_hash(parent, tokens)
            block_id = pool.find_cached(parent, tokens)
            if block_id is None:
                break
            pool.acquire(block_id)
            table.append(block_id)
            hashes.append(parent)
        self.tables[seq.seq_id], self.hashes[seq.seq_id] = table, hashes
        return len(table) * bs

    def allocate_slots(self, seq: Sequence, num_new: int) -> list[BlockCopy]:
        """Grow the table to cover `num_new` more tokens; copy-on-write a shared last block.

        Precondition: `blocks_needed(seq, num_new)` blocks are free. Returns the block copies the executor must do
        before the forward pass.
        """
        pool, bs = self.pools[seq.tier], self.tiers[seq.tier].block_size
        table = self.tables.setdefault(seq.seq_id, [])
        self.hashes.setdefault(seq.seq_id, [])
        copies: list[BlockCopy] = []
        if self._needs_cow(seq):
            idx = seq.num_computed_tokens // bs
            new = pool.allocate()
            copies.append(BlockCopy(seq.tier, table[idx], new))
            pool.release(table[idx])
            table[idx] = new
        table += pool.allocate_many(_cdiv(seq.num_computed_tokens + num_new, bs) - len(table))
        return copies

    def commit(self, seq: Sequence) -> None:
        """Register the sequence's newly full, computed blocks in the prefix cache."""
        if not self.enable_prefix_caching:
            return
        hashes, bs = self.hashes[seq.seq_id], self.tiers[seq.tier].block_size
        full = seq.num_computed_tokens // bs
        if full <= len(hashes):  # the common decode step: no block filled up
            return
        table, token_ids = self.tables[seq.seq_id], seq.token_ids
        parent = hashes[-1] if hashes else None
        blocks = []
        for i in range(len(hashes), full):
            tokens = tuple(token_ids[i * bs : (i + 1) * bs])
            parent = chain_hash(parent, tokens)
            hashes.append(parent)
            blocks.append((table[i], parent, tokens))
        self.pools[seq.tier].register_many(blocks)

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """The child shares every block of the parent (ref counts go up)."""
        table = self.tables[parent.seq_id]
        for block_id in table:
            self.pools[parent.tier].acquire(block_id)
        self.tables[child.seq_id] = list(table)
        self.hashes[child.seq_id] = list(self.hashes[parent.seq_id])

    def free(self, seq: Sequence) -> None:
        """Release the sequence's blocks, tail first so shared prefixes are evicted last."""
        self.pools[seq.tier].release_many(reversed(self.tables.pop(seq.seq_id, [])))
        self.hashes.pop(seq.seq_id, None)
        self.cpu_pools[seq.tier].release_many(self.cpu_tables.pop(seq.seq_id, []))

    def swap_out(self, seq: Sequence) -> list[BlockCopy]:
        """Move the table to the CPU pool (precondition: `can_swap_out`); returns device->CPU copies."""
        cpu_pool = self.cpu_pools[seq.tier]
        table = self.tables.pop(seq.seq_id)
        copies = [BlockCopy(seq.tier, src, dst) for src, dst in zip(table, cpu_pool.allocate_many(len(table)))]
        self.cpu_tables[seq.seq_id] = [c.dst for c in copies]
        self.pools[seq.tier].release_many(reversed(table))
        return copies

    def swap_in(self, seq: Sequence) -> list[BlockCopy]:
        """Bring the table back (precondition: `can_swap_in`); returns CPU->device copies."""
        pool, cpu_pool = self.pools[seq.tier], self.cpu_pools[seq.tier]
        cpu_table = self.cpu_tables.pop(seq.seq_id)
        copies = [BlockCopy(seq.tier, src, dst) for src, dst in zip(cpu_table, pool.allocate_many(len(cpu_table)))]
        cpu_pool.release_many(cpu_table)
        table = self.tables[seq.seq_id] = [c.dst for c in copies]
        bs = self.tiers[seq.tier].block_size
        pool.register_many([(table[i], block_hash, tuple(seq.token_ids[i * bs : (i + 1) * bs]))
                            for i, block_hash in enumerate(self.hashes[seq.seq_id])])
        return copies

    # ---- accounting ----------------------------------------------------------------------------
    def usage(self, seqs: Seq[Sequence]) -> KVUsage:
        """Pool-wide usage; waste is the unfilled tail of each live sequence's last block."""
        used = allocated = cached = 0
        for pool, size in zip(self.pools, self.block_sizes):  # every step asks: one pass over the pools
            used += pool.num_used
            allocated += pool.num_used * size
            cached += pool.num_cached
        tails: dict[tuple[int, int], int] = {}  # (tier, last block) -> its empty slots; forks share a tail
        tables, sizes = self.tables, self.block_sizes
        for seq in seqs:
            table = tables.get(seq.seq_id)
            if table:
                empty = len(table) * sizes[seq.tier] - seq.num_computed_tokens
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
