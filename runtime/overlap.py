"""Async scheduling (`scheduler.async_scheduling`, vLLM's name): the host schedules and builds step N+1 while
the device runs step N. No torch at import.

One `LLMEngine.step` call under it:

    schedule N+1      sequences that sampled in step N are decodes of a token the host does not know yet
    launch N+1        inputs built on the host; those rows take step N's tokens on the device (`PreviousTokens`)
    drain N           wait for step N's tokens only (its event), then the synchronous engine's bookkeeping:
                      tokens appended, stops (EOS, stop ids and strings, max_tokens), outputs
    sample N+1        computed tokens catch up, forks (n>1), the draws queued on the device: the step in flight

so the device always has the next step queued while the host works. A sequence that step N stopped was also
in step N+1: its row's token is dropped, never appended or reported (the KV it wrote goes to a slot of its own
freed blocks, which no prefix-cache entry covers). A sequence that step N's token ends by length is not
scheduled in N+1 at all (`Scheduler.async_scheduling`). Between steps the in-flight sequence's last token id is
`UNKNOWN`, never read: the device holds it.

What stays synchronous: a step whose requests ask for logprobs, an engine that records them
(`record_logprobs`), and a step with a batched half-precision top-k draw are sampled and applied at once
(the next step then has no token in flight); `abort` (and so `reset`) drains the step in flight first, so an
aborted request ends with the tokens it would have without async scheduling.

Outputs equal the synchronous engine's token for token: a token is reported one step later, never another.
Batches may differ (a stopped sequence's extra row, blocks freed one step later), so on a device whose
kernels' rounding depends on the batch, greedy ties may break differently, as between any two batchings.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, NamedTuple

from runtime.backend import PreviousTokens
from runtime.scheduler import SchedulerOutput
from runtime.sequence import SeqStatus, Sequence

if TYPE_CHECKING:
    from runtime.engine import LLMEngine
    from runtime.outputs import RequestOutput

UNKNOWN = -1  # a sampled token not yet on the host; the input builders' rows for it are filled on the device


class _InFlight(NamedTuple):
    """A step whose sampled tokens are still on their way to the host."""

    seqs: list[Sequence]  # the sequences that sampled, in the tokens' order; each ends with UNKNOWN
    tokens: Any  # runtime.deferred.DeferredTokens: [len(seqs)] on the device, and its copy to the host
    index: dict[int, int]  # seq_id -> its token's place in `tokens`


class OverlapStepper:
    """`LLMEngine.step` under async scheduling; holds the step in flight."""

    def __init__(self, engine: LLMEngine) -> None:
        # a proxy: the engine holds this stepper, and a strong reference back would keep a dropped engine (its KV
        # pool, its graphs) alive until the garbage collector runs, past the next engine's memory plan
        self.engine = weakref.proxy(engine)
        self.in_flight: _InFlight | None = None

    def step(self) -> list[RequestOutput]:
        e = self.engine
        outputs, e._pending = e._pending, []
        sched = e._schedule()
        logits = None if sched.empty else e.runner.execute(sched, self._previous(sched))
        outputs += self.drain()
        if logits is not None:
            outputs += self._sample(sched, logits)
        e._end_step(sched)
        return outputs

    def drain(self) -> list[RequestOutput]:
        """The step in flight, if any, to the host: its tokens appended and checked for stops; its outputs."""
        flight, self.in_flight = self.in_flight, None
        if flight is None:
            return []
        pairs = []
        for seq, token in zip(flight.seqs, flight.tokens.tolist()):  # waits for that step's tokens only
            seq.token_ids.pop()  # UNKNOWN
            if seq.status is not SeqStatus.FINISHED:
                pairs.append((seq, token))
        return self.engine._apply(pairs)

    def _previous(self, sched: SchedulerOutput) -> PreviousTokens | None:
        """The input rows of `sched` whose token is the step in flight's: a scheduled sequence's last token."""
        flight = self.in_flight
        if flight is None:
            return None
        rows, src, row = [], [], 0
        for item in sched.scheduled:
            row += item.num_new_tokens
            i = flight.index.get(item.seq.seq_id)
            if i is not None and item.start + item.num_new_tokens == item.seq.num_tokens:
                rows.append(row - 1)
                src.append(i)
        return PreviousTokens(flight.tokens.device, rows, src) if rows else None

    def _sample(self, sched: SchedulerOutput, logits: Any) -> list[RequestOutput]:
        """The step's draws queued on the device (it becomes the step in flight), or, where the host must
        sample, drawn and applied now as the synchronous engine does."""
        e = self.engine
        groups = e._groups(e.scheduler.update_computed_rows(sched))
        seqs = [seq for group in groups for seq in group]
        if not seqs:
            return []
        rows = e._sample_rows(groups)
        tokens = None if e._needs_host_sampling() else e.sampler.sample_deferred(logits, rows)
        if tokens is None:
            return e._apply(e._pairs(groups, e._sample_now(logits, groups, rows)))
        for seq in seqs:
            seq.token_ids.append(UNKNOWN)
        self.in_flight = _InFlight(seqs, tokens, {seq.seq_id: i for i, seq in enumerate(seqs)})
        return []
