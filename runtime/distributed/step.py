"""A step as rank 0 sends it to the other ranks: what their model runners need of the scheduler's decision.

The other ranks hold no scheduler and no block tables. Rank 0 sends, per scheduled sequence, its tier, the
tokens computed this step and its block table (`StepMessage.of`); a rank rebuilds a `SchedulerOutput` whose
sequences carry just that (`StepMessage.output`) over a `KVCacheManager` of the same tiers whose tables are
the step's (`StepMessage.apply_tables`), so `ModelRunner.execute` runs the same code on every rank.
"""

from __future__ import annotations

from typing import NamedTuple

from runtime.kv.manager import BlockCopy, KVCacheManager
from runtime.scheduler import ScheduledSeq, SchedulerOutput

__all__ = ["StepMessage"]


class _Row(NamedTuple):
    seq_id: int
    tier: int
    start: int  # computed tokens before this step
    tokens: list[int]  # the tokens computed this step: the sequence's [start, start + len)
    sample: bool
    table: list[int]  # the sequence's block table, covering them


class _Tokens:
    """A sequence's tokens [start, start + len(ids)), indexed as the whole sequence's (`build_inputs` slices)."""

    __slots__ = ("ids", "start")

    def __init__(self, start: int, ids: list[int]) -> None:
        self.start, self.ids = start, ids

    def __getitem__(self, span: slice) -> list[int]:
        assert span.start >= self.start and span.stop <= self.start + len(self.ids), span
        return self.ids[span.start - self.start: span.stop - self.start]


class _RemoteSeq(NamedTuple):
    """What a rank's runner reads of a sequence (`runtime.inputs`): its id, tier and this step's tokens."""

    seq_id: int
    tier: int
    token_ids: _Tokens


class StepMessage(NamedTuple):
    rows: tuple[_Row, ...]  # scheduled order
    swap_out: tuple[BlockCopy, ...]
    swap_in: tuple[BlockCopy, ...]
    block_copies: tuple[BlockCopy, ...]

    @classmethod
    def of(cls, out: SchedulerOutput, kv: KVCacheManager) -> StepMessage:
        rows = tuple(_Row(s.seq.seq_id, s.seq.tier, s.start, s.seq.token_ids[s.start: s.start + s.num_new_tokens],
                          s.sample, kv.block_table(s.seq)) for s in out.scheduled)
        return cls(rows, out.swap_out, out.swap_in, out.block_copies)

    def apply_tables(self, kv: KVCacheManager) -> None:
        """Make `kv`'s block tables this step's (a rank's mirror of rank 0's tables, for its sequences)."""
        kv.mirror_tables((r.seq_id, r.tier, r.table) for r in self.rows)

    def output(self) -> SchedulerOutput:
        scheduled = tuple(ScheduledSeq(_RemoteSeq(r.seq_id, r.tier, _Tokens(r.start, r.tokens)),  # type: ignore[arg-type]
                                       r.start, len(r.tokens), r.sample) for r in self.rows)
        return SchedulerOutput(scheduled, self.swap_out, self.swap_in, self.block_copies,
                               sum(len(r.tokens) for r in self.rows), 0)
