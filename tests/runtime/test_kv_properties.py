"""Property-based tests of the KV bookkeeping: random admit / compute / fork / free / swap / fill sequences.

Besides the bookkeeping invariants, a fake KV store checks contents: writing token p of a sequence
stores the prefix `token_ids[:p + 1]` in its slot (a token's KV depends on every token before it);
block copies (copy-on-write, swap) are replayed on the store as the executor would. Every live
sequence must then read its own prefixes back through its table, and every cached block must hold
the prefix its hash stands for; a wrong prefix hit or a missed copy-on-write breaks one of them.
"""

from __future__ import annotations

import itertools

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from runtime.kv.manager import BlockCopy, KVCacheManager, TierSpec
from runtime.sequence import Sequence
from tests.runtime.kv_factories import assert_kv_invariants, make_child, make_seq

LAYOUTS = {
    "one_tier": [TierSpec(24, 2, 12, 8)],
    "two_tiers": [TierSpec(8, 2, 8, 6), TierSpec(24, 4, 8, 6)],
}
TOKENS = st.lists(st.integers(0, 1), min_size=1, max_size=12)  # two symbols: prefixes collide often
Store = dict[int, tuple[int, ...]]  # slot -> prefix whose last token's KV sits there


class KVMachine(RuleBasedStateMachine):
    @initialize(layout=st.sampled_from(sorted(LAYOUTS)), watermark=st.sampled_from([0.0, 0.25]))
    def setup(self, layout: str, watermark: float) -> None:
        self.kv = KVCacheManager(LAYOUTS[layout], enable_prefix_caching=True, watermark=watermark)
        self.device: list[Store] = [{} for _ in self.kv.tiers]
        self.cpu: list[Store] = [{} for _ in self.kv.tiers]
        self.prefix_of: list[dict[int, tuple[int, ...]]] = [{} for _ in self.kv.tiers]  # hash -> prefix
        self.running: dict[int, Sequence] = {}
        self.swapped: dict[int, Sequence] = {}
        self.ids = itertools.count()

    # ---- emulated executor ---------------------------------------------------------------------
    def _copy(self, copies: list[BlockCopy], src: list[Store], dst: list[Store]) -> None:
        for c in copies:
            bs = self.kv.tiers[c.tier].block_size
            for o in range(bs):
                value = src[c.tier].get(c.src * bs + o)
                if value is None:
                    dst[c.tier].pop(c.dst * bs + o, None)
                else:
                    dst[c.tier][c.dst * bs + o] = value

    def _compute(self, seq: Sequence, n: int) -> bool:
        """try_allocate + write + commit for the next n tokens; False when the pool is short."""
        copies = self.kv.try_allocate(seq, n) if n else None
        if copies is None:
            return False
        event(f"copy-on-write copies: {len(copies)}")
        self._copy(copies, self.device, self.device)
        bs, table = self.kv.tiers[seq.tier].block_size, self.kv.tables[seq.seq_id]
        for p in range(seq.num_computed_tokens, seq.num_computed_tokens + n):
            self.device[seq.tier][table[p // bs] * bs + p % bs] = tuple(seq.token_ids[: p + 1])
        seq.num_computed_tokens += n
        self.kv.commit(seq)
        for i, block_hash in enumerate(self.kv.hashes[seq.seq_id]):
            prefix = tuple(seq.token_ids[: (i + 1) * bs])
            assert self.prefix_of[seq.tier].setdefault(block_hash, prefix) == prefix
        return True

    def _admit(self, prompt: list[int], tier: int, chunk: int) -> None:
        seq = make_seq(prompt, next(self.ids), tier=tier)
        seq.num_computed_tokens = self.kv.match_prefix(seq)
        event(f"prefix hit: {seq.num_computed_tokens > 0}")
        if self._compute(seq, min(chunk, seq.num_uncomputed)):
            self.running[seq.seq_id] = seq
        else:
            self.kv.free(seq)  # a waiting head gives its prefix blocks back

    def _pick(self, seqs: dict[int, Sequence], pick: int) -> Sequence:
        return seqs[sorted(seqs)[pick % len(seqs)]]

    # ---- operations ----------------------------------------------------------------------------
    @rule(prompt=TOKENS, chunk=st.integers(1, 12))
    def admit(self, prompt: list[int], chunk: int) -> None:
        tier = self.kv.tier_for(len(prompt))
        assert tier is not None
        self._admit(prompt, tier, chunk)

    @rule(tier=st.integers(0, 1), prompt=TOKENS)
    def fill(self, tier: int, prompt: list[int]) -> None:
        """Admit a sequence as long as the free blocks of a tier allow: evicts every cached free block."""
        tier %= len(self.kv.tiers)
        spec, pool = self.kv.tiers[tier], self.kv.pools[tier]
        length = min(pool.num_free * spec.block_size, spec.max_len)
        if length:
            cached_free = any(pool.hashes[b] is not None for b in pool.free_queue)  # what taking them all evicts
            self._admit((prompt * length)[:length], tier, length)
            event(f"fill evicted: {cached_free}")

    @precondition(lambda self: self.running)
    @rule(pick=st.integers(0, 99), n=st.integers(1, 6), new=st.lists(st.integers(0, 1), min_size=1, max_size=3))
    def advance(self, pick: int, n: int, new: list[int]) -> None:
        """Compute up to n pending tokens; a fully computed sequence first gets `new` tokens (sampled)."""
        seq = self._pick(self.running, pick)
        if seq.num_uncomputed == 0:
            room = self.kv.tiers[seq.tier].max_len - seq.num_tokens
            seq.token_ids.extend(new[:room])
        self._compute(seq, min(n, seq.num_uncomputed))

    @precondition(lambda self: self.running)
    @rule(pick=st.integers(0, 99), sample=st.booleans(), tokens=st.tuples(st.integers(0, 1), st.integers(0, 1)))
    def fork(self, pick: int, sample: bool, tokens: tuple[int, int]) -> None:
        """Share the parent's blocks; with `sample`, both then compute a token of their own, as n > 1 does."""
        parent = self._pick(self.running, pick)
        child = make_child(parent, next(self.ids))
        self.kv.fork(parent, child)
        self.running[child.seq_id] = child
        for seq, token in zip((parent, child), tokens):
            if sample and seq.num_uncomputed == 0 and seq.num_tokens < self.kv.tiers[seq.tier].max_len:
                seq.token_ids.append(token)
                self._compute(seq, 1)

    @precondition(lambda self: self.running or self.swapped)
    @rule(pick=st.integers(0, 99))
    def free(self, pick: int) -> None:
        seq = self._pick({**self.running, **self.swapped}, pick)
        self.kv.free(seq)
        self.running.pop(seq.seq_id, None)
        self.swapped.pop(seq.seq_id, None)

    @precondition(lambda self: self.running)
    @rule(pick=st.integers(0, 99))
    def swap_out(self, pick: int) -> None:
        seq = self._pick(self.running, pick)
        if self.kv.can_swap_out(seq):
            self._copy(self.kv.swap_out(seq), self.device, self.cpu)
            self.swapped[seq.seq_id] = self.running.pop(seq.seq_id)

    @precondition(lambda self: self.swapped)
    @rule(pick=st.integers(0, 99))
    def swap_in(self, pick: int) -> None:
        seq = self._pick(self.swapped, pick)
        if self.kv.can_swap_in(seq):
            self._copy(self.kv.swap_in(seq), self.cpu, self.device)
            self.running[seq.seq_id] = self.swapped.pop(seq.seq_id)

    # ---- invariants ----------------------------------------------------------------------------
    @precondition(lambda self: hasattr(self, "kv"))  # invariants may run before setup
    @invariant()
    def bookkeeping_holds(self) -> None:
        assert_kv_invariants(self.kv, [*self.running.values(), *self.swapped.values()])

    @precondition(lambda self: hasattr(self, "kv"))  # invariants may run before setup
    @invariant()
    def every_sequence_reads_back_its_own_tokens(self) -> None:
        for seqs, tables, store in ((self.running, self.kv.tables, self.device),
                                    (self.swapped, self.kv.cpu_tables, self.cpu)):
            for seq in seqs.values():
                bs, table = self.kv.tiers[seq.tier].block_size, tables[seq.seq_id]
                assert len(table) == -(-seq.num_computed_tokens // bs)
                assert len(self.kv.hashes[seq.seq_id]) == seq.num_computed_tokens // bs
                for p in range(seq.num_computed_tokens):
                    assert store[seq.tier].get(table[p // bs] * bs + p % bs) == tuple(seq.token_ids[: p + 1])

    @precondition(lambda self: hasattr(self, "kv"))  # invariants may run before setup
    @invariant()
    def every_cached_block_holds_its_prefix(self) -> None:
        for tier, pool in enumerate(self.kv.pools):
            bs = self.kv.tiers[tier].block_size
            for block_hash, block_id in pool.cached.items():
                prefix = self.prefix_of[tier][block_hash]
                assert pool.tokens[block_id] == prefix[-bs:]
                for o in range(bs):
                    assert self.device[tier].get(block_id * bs + o) == prefix[: len(prefix) - bs + o + 1]


TestKVMachine = KVMachine.TestCase
TestKVMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
