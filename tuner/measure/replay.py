"""Open-loop replay of recorded traffic through the engine.

Each request enters the engine at its (scaled) arrival time whatever the engine's backlog, so a
burst queues and its latencies include the queueing. The clock is the real clock while the engine
has work and jumps over idle gaps, so a sparse trace costs only its busy time:

    real time   |--busy--|            idle             |--busy--|
    replay time |--busy--|>>>>>>>> jump to next arrival |--busy--|

The engine is built with this clock (`LLMEngine(config, clock=clock)`); each replay restarts it and
resets the engine, so replays on one engine are independent. Generation is forced to each request's
logged output length (greedy, EOS ignored).

A replay stops early only when its verdict is certain: once `stop_after_misses` requests have
finished missing the SLO (`tuner.measure.metrics.stop_after_misses` says how many), more requests cannot
change it. Nothing is judged on the head of a replay.
"""

from __future__ import annotations

import functools
import math
import time
from collections import deque
from collections.abc import Callable, Sequence

from runtime import LLMEngine, RequestOutput, RequestOutputKind, SamplingParams
from tuner.config import SloConfig
from tuner.measure.metrics import latency_row, meets_slo
from tuner.measure.timeline import ReplayResult, RequestRecord
from tuner.traffic import TrafficRequest

Progress = Callable[[int], None]  # requests finished so far


class ReplayClock:
    """Seconds since the replay started, plus every idle gap skipped so far."""

    def __init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        self._t0 = time.perf_counter()
        self.skipped_s = 0.0

    def __call__(self) -> float:
        return time.perf_counter() - self._t0 + self.skipped_s

    def jump_to(self, t: float) -> None:
        """Move the clock forward to `t` (never backwards)."""
        now = self()
        if t > now:
            self.skipped_s += t - now


def _record(out: RequestOutput) -> RequestRecord:
    m = out.metrics
    return RequestRecord(
        request_id=out.request_id, arrival=m.arrival_time, first_scheduled=m.first_scheduled_time,
        first_token=m.first_token_time, finished=m.finished_time if m.finished_time is not None else m.arrival_time,
        token_times=tuple(m.token_times), prompt_tokens=len(out.prompt_token_ids),
        output_tokens=len(out.outputs[0].token_ids), cached_tokens=m.num_cached_tokens,
        preemptions=m.num_preemptions, rejected_reason=out.rejected_reason)


def replay(engine: LLMEngine, clock: ReplayClock, requests: Sequence[TrafficRequest], *, slo: SloConfig | None = None,
           stop_after_misses: int | None = None, progress: Progress | None = None,
           poll: Callable[[], None] | None = None) -> ReplayResult:
    """Replay `requests` (sorted by arrival, first at 0.0) on a reset engine; what happened to each. `poll` runs
    before every step and may raise to abandon the replay (a signal, `tuner.interrupts`)."""
    engine.reset()
    clock.restart()
    pending = deque(sorted(requests, key=lambda r: r.arrival_s))
    records: list[RequestRecord] = []
    misses = 0
    stopped = False
    while (pending or engine.has_unfinished_requests()) and not stopped:
        now = clock()
        while pending and pending[0].arrival_s <= now:
            _admit(engine, pending.popleft())
        if not engine.has_unfinished_requests():
            clock.jump_to(pending[0].arrival_s)
            continue
        if poll is not None:
            poll()
        for out in engine.step():
            if out.finished:
                records.append(_record(out))
                misses += is_miss(records[-1], slo)
                if progress is not None:
                    progress(len(records))
        stopped = stop_after_misses is not None and misses >= stop_after_misses
    totals = engine.totals
    return replay_result(records, len(requests), clock, stopped,
                         (totals.kv_util_mean, totals.kv_util_peak, totals.kv_waste_mean))


def is_miss(record: RequestRecord, slo: SloConfig | None) -> bool:
    """Whether a finished request counts against the SLO (never, without one)."""
    return slo is not None and not meets_slo(latency_row(record), slo)


def replay_result(records: list[RequestRecord], requests: int, clock: ReplayClock, stopped: bool,
                  kv: tuple[float, float, float] = (math.nan, math.nan, math.nan)) -> ReplayResult:
    """What a replay recorded: its span from first arrival to last finish, its busy (unskipped) time, and
    the engine's KV figures (mean use, peak use, mean waste; NaN where the engine is out of sight)."""
    first = min((r.arrival for r in records), default=0.0)
    last = max((r.finished for r in records), default=0.0)
    return ReplayResult(tuple(records), requests, max(last - first, 1e-9), clock() - clock.skipped_s, stopped, *kv)


def _admit(engine: LLMEngine, req: TrafficRequest) -> None:
    params = SamplingParams(max_tokens=req.output_tokens, temperature=0.0, ignore_eos=True,
                            output_kind=RequestOutputKind.FINAL_ONLY)
    engine.add_request(req.request_id, req.prompt_token_ids, params, arrival_time=req.arrival_s,
                       priority=req.priority)


def engine_replay(engine: LLMEngine, clock: ReplayClock, poll: Callable[[], None] | None = None):
    """`measure_window`'s replay function over one engine (reset before each replay); `poll` before every step."""
    return functools.partial(replay, engine, clock, poll=poll)
