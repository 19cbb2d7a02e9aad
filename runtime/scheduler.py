"""Continuous batching: which sequences compute how many tokens this step.

One rule drives it: each sequence's computed tokens catch up with its total tokens, under a token
budget per step. A decode is a sequence one token behind; a prefill (or a chunk of one) is further
behind; a prefix-cache hit starts a sequence with tokens already computed. Order each step:

    1. running decodes, oldest first      (latency of running requests comes first)
    2. running prefills, oldest first      (chunks continue)
    3. swapped sequences back in           (only if nothing was preempted this step)
    4. waiting sequences admitted          (FCFS or priority; keeps a free-block watermark)

When blocks run out the newest running sequence is preempted (recompute: drop its blocks and
start over from the waiting queue; swap: move its blocks to the CPU pool).

After the step the scheduler's state catches up with what ran (as vLLM v1's `update_from_output`): the engine
calls `update_computed` once the forward ran (computed tokens, prefix-cache commits: the sequences that sample),
then `update_from_output` with the sampled tokens (appended, timestamped, stop conditions; finished
sequences leave and free their blocks). Under async scheduling (`runtime.overlap`) the tokens come one step
late: a step may be scheduled with a sequence that the previous step's token then stops
(`update_computed_rows` skips it).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

from runtime.kv.manager import BlockCopy, KVCacheManager
from runtime.sequence import SeqStatus, Sequence


class ScheduledSeq(NamedTuple):
    seq: Sequence
    start: int  # computed tokens before this step = position of the first new token
    num_new_tokens: int  # tokens seq.token_ids[start : start + num_new_tokens] are computed now
    sample: bool  # this step computes the sequence's last token, so a new token is sampled


@dataclass(frozen=True)
class SchedulerOutput:
    scheduled: tuple[ScheduledSeq, ...]  # sorted by tier, decodes first within a tier
    swap_out: tuple[BlockCopy, ...]  # device -> CPU; done first
    swap_in: tuple[BlockCopy, ...]  # CPU -> device; done second
    block_copies: tuple[BlockCopy, ...]  # copy-on-write device -> device; done third
    num_batched_tokens: int
    num_preempted: int

    @property
    def empty(self) -> bool:
        return not self.scheduled and not self.swap_out


class StepUpdate(NamedTuple):
    """What `update_from_output` did to the sampled sequences."""

    finished: list[Sequence]  # those that stopped this step, in order; they left the scheduler
    closing: set[int]  # seq ids among them whose finish finished their request (its last sample)


class Scheduler:
    def __init__(self, kv: KVCacheManager, *, max_num_seqs: int, max_num_batched_tokens: int,
                 chunked_prefill: bool, preemption_mode: str, policy: str = "fcfs",
                 eos_ids: frozenset[int] = frozenset(), max_model_len: int | None = None,
                 async_scheduling: bool = False) -> None:
        """`eos_ids` stop a sample (unless its params ignore EOS); `max_model_len` (None: no cap) ends one at
        that many tokens; `async_scheduling`: a running sequence's last token may still be on the device
        (`runtime.overlap`), so one that this token ends by length is not scheduled."""
        self.kv = kv
        self.async_scheduling = async_scheduling
        self.eos_ids = eos_ids
        self.max_model_len = max_model_len
        # fcfs: arrival order; priority: lower `priority` first, then arrival.
        self.key = _fcfs_key if policy == "fcfs" else _priority_key
        self.max_num_seqs = max_num_seqs
        self.budget = max_num_batched_tokens
        self.chunked = chunked_prefill
        self.swap = preemption_mode == "swap"
        self.waiting: list[Sequence] = []  # sorted by self.key
        self.running: list[Sequence] = []  # sorted by self.key
        self.swapped: list[Sequence] = []  # sorted by self.key

    @property
    def num_unfinished(self) -> int:
        return len(self.waiting) + len(self.running) + len(self.swapped)

    def add(self, seq: Sequence) -> None:
        seq.status = SeqStatus.WAITING
        bisect.insort(self.waiting, seq, key=self.key)

    def add_running(self, seq: Sequence) -> None:
        """A forked sibling joins the running set directly (it shares its parent's blocks)."""
        seq.status = SeqStatus.RUNNING
        bisect.insort(self.running, seq, key=self.key)

    def remove(self, seq: Sequence) -> None:
        """Take a finished or aborted sequence out of whichever queue holds it and free its blocks."""
        for queue in (self.waiting, self.running, self.swapped):
            if seq in queue:
                queue.remove(seq)
        self.kv.free(seq)
        seq.status = SeqStatus.FINISHED

    # ---- after the step ------------------------------------------------------------------------
    def update_computed(self, out: SchedulerOutput) -> list[Sequence]:
        """The forward of `out` ran: each scheduled sequence's computed tokens catch up by what it ran, and its
        newly full blocks enter the prefix cache (in schedule order). Returns the sequences that sample."""
        return [seq for seq in self.update_computed_rows(out) if seq is not None]

    def update_computed_rows(self, out: SchedulerOutput) -> list[Sequence | None]:
        """`update_computed`, per sampling row of `out` its sequence, or None for one that finished after `out`
        was scheduled (async scheduling sees a stop one step late): left as it is, its row's token dropped."""
        rows: list[Sequence | None] = []
        for item in out.scheduled:
            seq = item.seq
            if seq.status is SeqStatus.FINISHED:
                if item.sample:
                    rows.append(None)
                continue
            seq.num_computed_tokens += item.num_new_tokens
            self.kv.commit(seq)
            if item.sample:
                rows.append(seq)
        return rows

    def update_from_output(self, sampled: Iterable[tuple[Sequence, int]], now: float,
                           text_stops: Callable[[Sequence], bool]) -> StepUpdate:
        """Each sampled token appended to its sequence (sample 0 stamps the token's time `now`); a sequence
        stops at an EOS or stop token, at a stop string (`text_stops`, asked only where its params have some),
        at max_tokens or at `max_model_len`, and leaves the scheduler with its blocks freed."""
        finished: list[Sequence] = []
        closing: set[int] = set()
        for seq, token in sampled:
            if self._append(seq, token, now, text_stops):
                self.remove(seq)
                finished.append(seq)
                if seq.request.finished:
                    closing.add(seq.seq_id)
        return StepUpdate(finished, closing)

    def _append(self, seq: Sequence, token: int, now: float, text_stops: Callable[[Sequence], bool]) -> bool:
        """Add `token` to `seq`; True when that stops it (its `finish_reason` set)."""
        req, params = seq.request, seq.request.params
        seq.token_ids.append(token)
        if seq.index == 0:
            req.metrics.token_times.append(now)
            if req.metrics.first_token_time is None:
                req.metrics.first_token_time = now
        stop_token = (token in self.eos_ids and not params.ignore_eos) or token in params.stop_token_ids
        if stop_token or (params.stop and text_stops(seq)):  # stop strings: only where params have them
            seq.finish_reason = "stop"
        elif self._at_length(seq):
            seq.finish_reason = "length"
        return seq.finish_reason is not None

    def _at_length(self, seq: Sequence) -> bool:
        """Its last token ends it: max_tokens outputs, or `max_model_len` tokens."""
        return seq.num_output_tokens >= seq.request.params.max_tokens or (
            self.max_model_len is not None and seq.num_tokens >= self.max_model_len)

    def schedule(self) -> SchedulerOutput:
        step = _Step(self.budget)
        decodes, prefills = [], []
        for s in self.running:
            (decodes if s.is_decode else prefills).append(s)
        if self.async_scheduling:  # a last token still being sampled ends these whatever it is: no step for them
            decodes = [s for s in decodes if not self._at_length(s)]
        for seq in decodes:
            if seq.status is SeqStatus.RUNNING and step.budget > 0:
                self._schedule_decode(seq, step)
        for seq in prefills:
            if seq.status is SeqStatus.RUNNING and step.budget > 0:
                self._schedule_running(seq, step)
        if step.num_preempted == 0:
            self._swap_in(step)
            self._admit_waiting(step)
        scheduled = step.ordered()
        return SchedulerOutput(
            scheduled=scheduled,
            swap_out=tuple(step.swap_out),
            swap_in=tuple(step.swap_in),
            block_copies=tuple(c for s in scheduled for c in step.copies.get(s.seq.seq_id, ())) if step.copies else (),
            num_batched_tokens=self.budget - step.budget,
            num_preempted=step.num_preempted,
        )

    def _chunk(self, seq: Sequence, budget: int) -> int:
        """Tokens to compute now: all that are left, or a chunk of them when chunked prefill is on."""
        if seq.num_uncomputed <= budget:
            return seq.num_uncomputed
        return budget if self.chunked else 0

    def _schedule_decode(self, seq: Sequence, step: _Step) -> None:
        """The hot path: one token, always sampled."""
        copies = self.kv.try_allocate(seq, 1)
        while copies is None:
            victim = self.running[-1]  # lowest priority / newest
            self._preempt(victim, step)
            if victim is seq:
                return
            copies = self.kv.try_allocate(seq, 1)
        step.scheduled[seq.seq_id] = ScheduledSeq(seq, seq.num_computed_tokens, 1, True)
        if copies:
            step.copies[seq.seq_id] = copies
        step.budget -= 1

    def _schedule_running(self, seq: Sequence, step: _Step) -> None:
        n = self._chunk(seq, step.budget)
        if n == 0:
            return
        copies = self.kv.try_allocate(seq, n)
        while copies is None:
            victim = self.running[-1]  # lowest priority / newest
            self._preempt(victim, step)
            if victim is seq:
                return
            copies = self.kv.try_allocate(seq, n)
        step.add(seq, n, copies)

    def _preempt(self, seq: Sequence, step: _Step) -> None:
        step.unschedule(seq)
        self.running.remove(seq)
        seq.request.metrics.num_preemptions += 1
        step.num_preempted += 1
        if self.swap and self.kv.can_swap_out(seq):
            step.swap_out.extend(self.kv.swap_out(seq))
            seq.status = SeqStatus.SWAPPED
            bisect.insort(self.swapped, seq, key=self.key)
            return
        self.kv.free(seq)
        seq.num_computed_tokens = 0
        seq.prefix_checked = False
        self.add(seq)

    def _swap_in(self, step: _Step) -> None:
        while self.swapped and len(self.running) < self.max_num_seqs and step.budget > 0:
            seq = self.swapped[0]
            # With nothing running the watermark is waived, so a swapped sequence always comes back.
            if not self.kv.can_swap_in(seq, keep_watermark=bool(self.running)):
                return
            self.swapped.pop(0)
            step.swap_in.extend(self.kv.swap_in(seq))
            self.add_running(seq)
            n = self._chunk(seq, step.budget)
            copies = self.kv.try_allocate(seq, n) if n else None
            if copies is not None:
                step.add(seq, n, copies)

    def _admit_waiting(self, step: _Step) -> None:
        while self.waiting and len(self.running) < self.max_num_seqs and step.budget > 0:
            seq = self.waiting[0]
            if not seq.prefix_checked:
                seq.num_computed_tokens = self.kv.match_prefix(seq)
                seq.request.metrics.num_cached_tokens = max(seq.request.metrics.num_cached_tokens,
                                                            seq.num_computed_tokens)
                seq.prefix_checked = True
            n = self._chunk(seq, step.budget)
            # With nothing running the watermark is waived, so a request that fits the pool always runs.
            copies = self.kv.try_allocate(seq, n, keep_watermark=bool(self.running)) if n else None
            if copies is None:
                self._release_prefix(seq)
                return
            self.waiting.pop(0)
            self.add_running(seq)
            step.add(seq, n, copies)

    def _release_prefix(self, seq: Sequence) -> None:
        """A waiting head that cannot start yet gives its prefix-cache blocks back (no hoarding)."""
        self.kv.free(seq)
        seq.num_computed_tokens = 0
        seq.prefix_checked = False


def _fcfs_key(seq: Sequence) -> tuple[float, int]:
    return (seq.request.arrival_time, seq.seq_id)


def _priority_key(seq: Sequence) -> tuple[int, float, int]:
    return (seq.request.priority, seq.request.arrival_time, seq.seq_id)


def _tier_then_decodes(s: ScheduledSeq) -> tuple[int, bool]:
    return (s.seq.tier, s.num_new_tokens != 1)


class _Step:
    """What one schedule() call has decided so far."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.scheduled: dict[int, ScheduledSeq] = {}
        self.copies: dict[int, list[BlockCopy]] = {}
        self.swap_out: list[BlockCopy] = []
        self.swap_in: list[BlockCopy] = []
        self.num_preempted = 0

    def add(self, seq: Sequence, n: int, copies: list[BlockCopy]) -> None:
        sample = seq.num_computed_tokens + n == seq.num_tokens
        self.scheduled[seq.seq_id] = ScheduledSeq(seq, seq.num_computed_tokens, n, sample)
        if copies:
            self.copies[seq.seq_id] = copies
        self.budget -= n

    def ordered(self) -> tuple[ScheduledSeq, ...]:
        """The scheduled sequences by tier, decodes first within a tier (stable: scheduling order otherwise)."""
        items = tuple(self.scheduled.values())
        return items if len(items) < 2 else tuple(sorted(items, key=_tier_then_decodes))

    def unschedule(self, seq: Sequence) -> None:
        """A sequence preempted after it was scheduled this step gives its budget back."""
        item = self.scheduled.pop(seq.seq_id, None)
        if item is not None:
            self.budget += item.num_new_tokens
            self.copies.pop(seq.seq_id, None)
