"""One tier's KV bookkeeping: its device and swap pools, and the block tables of the sequences it holds.

A sequence lives in one tier for its whole life (`Sequence.tier`), so everything about its blocks is the
tier's: the table grows by the tier's block size from the tier's pool, its full blocks are found in (and
registered to) the tier's prefix cache, and it swaps to the tier's CPU pool. A table always covers exactly
the tokens whose KV is (or is being) written:

    token:  0 1 2 3 | 4 5 6 7 | 8 9 .          block_size 4, 10 tokens computed
    table:  [ 12    ,  3      ,  40 ]          ceil(10 / 4) = 3 blocks; slot of token 9 = 40*4 + 1
"""

from __future__ import annotations

from typing import NamedTuple

from runtime.kv.block_pool import BlockPool, chain_hash, prompt_blocks
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


class TierKV:
    """Tier `index`'s pools and its sequences' tables; every method takes a sequence of this tier."""

    def __init__(self, index: int, spec: TierSpec, enable_caching: bool, watermark: float) -> None:
        self.index, self.spec, self.block_size = index, spec, spec.block_size
        self.enable_caching = enable_caching
        self.watermark_blocks = int(watermark * spec.num_blocks)  # kept free for running sequences' growth
        self.pool = BlockPool(spec.num_blocks, enable_caching)
        self.cpu_pool = BlockPool(spec.num_cpu_blocks, False)
        self.tables: dict[int, list[int]] = {}  # seq id -> device block ids
        self.hashes: dict[int, list[int]] = {}  # seq id -> chained hashes of its full blocks
        self.cpu_tables: dict[int, list[int]] = {}  # seq id -> swap block ids

    # ---- queries -------------------------------------------------------------------------------
    def blocks_needed(self, seq: Sequence, num_new: int) -> int:
        """New blocks for `num_new` more tokens, plus one if the first lands in a shared partial block.

        On the hot path (every running sequence, every step): written without helper calls.
        """
        bs = self.block_size
        computed = seq.num_computed_tokens
        table = self.tables.get(seq.seq_id)
        grow = -(-(computed + num_new) // bs) - (len(table) if table else 0)
        # Copy-on-write only when writing into a partly filled block that is shared (a fork's tail).
        cow = computed % bs != 0 and self.pool.refs[table[computed // bs]] > 1
        return max(0, grow) + cow

    def try_allocate(self, seq: Sequence, num_new: int, keep_watermark: bool) -> list[BlockCopy] | None:
        """`allocate_slots` when the blocks are there (beyond the watermark if asked): the copies, or None
        when the caller must preempt."""
        need = self.blocks_needed(seq, num_new)
        if need == 0:
            return []
        if not self._has_free(need, keep_watermark):
            return None
        return self.allocate_slots(seq, num_new)

    def can_swap_in(self, seq: Sequence, keep_watermark: bool) -> bool:
        return self._has_free(len(self.cpu_tables[seq.seq_id]), keep_watermark)

    def _has_free(self, need: int, keep_watermark: bool) -> bool:
        return need <= self.pool.num_free - (self.watermark_blocks if keep_watermark else 0)

    def can_swap_out(self, seq: Sequence) -> bool:
        return len(self.tables.get(seq.seq_id, [])) <= self.cpu_pool.num_free

    # ---- actions -------------------------------------------------------------------------------
    def match_prefix(self, seq: Sequence) -> int:
        """Take the longest cached run of the prompt's full blocks; return how many tokens it covers.

        At least one prompt token is always left to compute, since its logits give the first token.
        """
        assert seq.seq_id not in self.tables, "match_prefix on a sequence that already holds blocks"
        if not self.enable_caching:
            return 0
        pool, bs = self.pool, self.block_size
        table: list[int] = []
        hashes: list[int] = []
        parent: int | None = None
        known = _prompt_blocks(seq, bs)
        for i in range((seq.num_prompt_tokens - 1) // bs):
            parent, tokens = _full_block(seq, i, bs, parent, known)
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
        pool, bs, computed = self.pool, self.block_size, seq.num_computed_tokens
        table = self.tables.setdefault(seq.seq_id, [])
        self.hashes.setdefault(seq.seq_id, [])
        copies: list[BlockCopy] = []
        if computed % bs and pool.refs[table[computed // bs]] > 1:  # writing into a fork's shared tail
            idx = computed // bs
            new = pool.allocate()
            copies.append(BlockCopy(self.index, table[idx], new))
            pool.release(table[idx])
            table[idx] = new
        table += pool.allocate_many(-(-(computed + num_new) // bs) - len(table))
        return copies

    def commit(self, seq: Sequence) -> None:
        """Register the sequence's newly full, computed blocks in the prefix cache."""
        if not self.enable_caching:
            return
        hashes, bs = self.hashes[seq.seq_id], self.block_size
        full = seq.num_computed_tokens // bs
        if full <= len(hashes):  # the common decode step: no block filled up
            return
        table = self.tables[seq.seq_id]
        known = _prompt_blocks(seq, bs)
        parent = hashes[-1] if hashes else None
        blocks = []
        for i in range(len(hashes), full):
            parent, tokens = _full_block(seq, i, bs, parent, known)
            hashes.append(parent)
            blocks.append((table[i], parent, tokens))
        self.pool.register_many(blocks)

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """The child shares every block of the parent (ref counts go up)."""
        table = self.tables[parent.seq_id]
        for block_id in table:
            self.pool.acquire(block_id)
        self.tables[child.seq_id] = list(table)
        self.hashes[child.seq_id] = list(self.hashes[parent.seq_id])

    def free(self, seq: Sequence) -> None:
        """Release the sequence's blocks, tail first so shared prefixes are evicted last."""
        self.pool.release_many(reversed(self.tables.pop(seq.seq_id, [])))
        self.hashes.pop(seq.seq_id, None)
        self.cpu_pool.release_many(self.cpu_tables.pop(seq.seq_id, []))

    def swap_out(self, seq: Sequence) -> list[BlockCopy]:
        """Move the table to the CPU pool (precondition: `can_swap_out`); returns device->CPU copies."""
        table = self.tables.pop(seq.seq_id)
        dsts = self.cpu_pool.allocate_many(len(table))
        copies = [BlockCopy(self.index, src, dst) for src, dst in zip(table, dsts)]
        self.cpu_tables[seq.seq_id] = dsts
        self.pool.release_many(reversed(table))
        return copies

    def swap_in(self, seq: Sequence) -> list[BlockCopy]:
        """Bring the table back (precondition: `can_swap_in`); returns CPU->device copies. Its full blocks
        become findable again under their hashes."""
        cpu_table = self.cpu_tables.pop(seq.seq_id)
        table = self.tables[seq.seq_id] = self.pool.allocate_many(len(cpu_table))
        copies = [BlockCopy(self.index, src, dst) for src, dst in zip(cpu_table, table)]
        self.cpu_pool.release_many(cpu_table)
        bs = self.block_size
        self.pool.register_many([(table[i], block_hash, tuple(seq.token_ids[i * bs : (i + 1) * bs]))
                                 for i, block_hash in enumerate(self.hashes[seq.seq_id])])
        return copies


def _full_block(seq: Sequence, i: int, block_size: int, parent: int | None,
                known: tuple[list[int], list[tuple[int, ...]]]) -> tuple[int, tuple[int, ...]]:
    """Full block i's (chained hash, tokens): the prompt's, hashed once (`known`), or hashed here from `parent`
    (past the prompt, or a prompt given as a list)."""
    hashes, tokens = known
    if i < len(hashes):
        return hashes[i], tokens[i]
    block = tuple(seq.token_ids[i * block_size : (i + 1) * block_size])
    return chain_hash(parent, block), block


def _prompt_blocks(seq: Sequence, block_size: int) -> tuple[list[int], list[tuple[int, ...]]]:
    """The prompt's full blocks, hashed once per prompt tuple (`block_pool.prompt_blocks`); none to reuse for a
    prompt given as a list."""
    prompt = seq.request.prompt
    return prompt_blocks(prompt, block_size) if prompt is not None else ([], [])
