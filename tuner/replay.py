"""Open-loop replay of recorded traffic through the engine.

Each request enters the engine at its (scaled) arrival time whatever the engine's backlog, so a
burst queues and its latencies include the queueing. The clock is the real clock while the engine
has work and jumps over idle gaps, so a sparse trace costs only its busy time:

    real time   |--busy--|            idle             |--busy--|
    replay time |--busy--|>>>>>>>> jump to next arrival |--busy--|

Generation is forced to each request's logged output length (greedy, EOS ignored).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tqdm.auto import tqdm

from runtime import LLMEngine, RequestOutput, RequestOutputKind, SamplingParams, StepStats
from tuner.traffic import TrafficRequest


class ReplayClock:
    """Seconds since the replay started, plus every idle gap skipped so far."""

    def __init__(self) -> None:
        self._t0 = time.perf_counter()
        self.skipped_s = 0.0

    def __call__(self) -> float:
        return time.perf_counter() - self._t0 + self.skipped_s

    def jump_to(self, t: float) -> None:
        """Move the clock forward to `t` (never backwards)."""
        now = self()
        if t > now:
            self.skipped_s += t - now


@dataclass(frozen=True)
class RequestRecord:
    """One replayed request's life on the replay clock (seconds)."""

    request_id: str
    arrival: float
    first_scheduled: float | None
    first_token: float | None
    finished: float
    token_times: tuple[float, ...]
    prompt_tokens: int
    output_tokens: int  # generated (the logged length unless aborted or rejected)
    cached_tokens: int
    preemptions: int
    rejected_reason: str | None


@dataclass(frozen=True)
class ReplayResult:
    records: tuple[RequestRecord, ...]  # in completion order
    step_stats: tuple[StepStats, ...]
    duration_s: float  # first arrival to last finish, on the replay clock
    busy_s: float  # real seconds spent (the skipped idle time excluded)
    stopped_early: bool  # the progress callback asked to stop (a pruned trial)


Progress = Callable[[int, Sequence[RequestRecord]], bool]  # (requests done, records) -> keep going?


def _record(out: RequestOutput) -> RequestRecord:
    m = out.metrics
    return RequestRecord(
        request_id=out.request_id, arrival=m.arrival_time, first_scheduled=m.first_scheduled_time,
        first_token=m.first_token_time, finished=m.finished_time if m.finished_time is not None else m.arrival_time,
        token_times=tuple(m.token_times), prompt_tokens=len(out.prompt_token_ids),
        output_tokens=len(out.outputs[0].token_ids), cached_tokens=m.num_cached_tokens,
        preemptions=m.num_preemptions, rejected_reason=out.rejected_reason)


def replay(engine: LLMEngine, requests: Sequence[TrafficRequest], *, progress: Progress | None = None,
           report_every: int = 0, show_progress: bool = False, desc: str = "replay") -> ReplayResult:
    """Replay `requests` (sorted by arrival, first at 0.0) and return what happened to each."""
    clock = ReplayClock()
    engine.clock = clock
    pending = deque(sorted(requests, key=lambda r: r.arrival_s))
    records: list[RequestRecord] = []
    stopped = False
    with tqdm(total=len(pending), desc=desc, unit="req", disable=not show_progress, leave=False) as bar:
        while (pending or engine.has_unfinished_requests()) and not stopped:
            now = clock()
            while pending and pending[0].arrival_s <= now:
                _admit(engine, pending.popleft())
            if not engine.has_unfinished_requests():
                clock.jump_to(pending[0].arrival_s)
                continue
            for out in engine.step():
                if out.finished:
                    records.append(_record(out))
                    bar.update(1)
                    if report_every and progress and not stopped and len(records) % report_every == 0:
                        stopped = not progress(len(records), records)
    for rid in list(engine.requests):  # a stopped replay leaves nothing behind in the engine
        engine.abort(rid)
    engine.step()
    first = min((r.arrival for r in records), default=0.0)
    last = max((r.finished for r in records), default=0.0)
    return ReplayResult(tuple(records), tuple(engine.step_stats), max(last - first, 1e-9),
                        clock() - clock.skipped_s, stopped)


def _admit(engine: LLMEngine, req: TrafficRequest) -> None:
    params = SamplingParams(max_tokens=req.output_tokens, temperature=0.0, ignore_eos=True,
                            output_kind=RequestOutputKind.FINAL_ONLY)
    engine.add_request(req.request_id, list(req.prompt_token_ids), params, arrival_time=req.arrival_s,
                       priority=req.priority)
