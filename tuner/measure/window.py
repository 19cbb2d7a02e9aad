"""A window measured: `WindowReplayer`, the replay(scale) that `measure.measure` calls (the window at a rate
scale through an engine's replay, `replay.engine_replay`, or a server's, `http_replay.http_replay`), and
`measure_window`, the one way every executor measures a window (warm-up, then the measurement).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol

from tuner.config import SloConfig
from tuner.measure.job import Measurement, MeasurePlan, Probe, ReplaySummary
from tuner.measure.measure import ONE_AT_A_TIME, Checkpoint, Fan, Progress, measure
from tuner.measure.metrics import replay_summary, stop_after_misses
from tuner.measure.timeline import ReplayResult
from tuner.traffic import TrafficRequest, rebase

__all__ = ["ReplayFn", "WindowReplayer", "measure_window"]


class ReplayFn(Protocol):
    """One open-loop replay of requests (first arrival at 0.0): an engine's (`replay.engine_replay`) or a
    server's (`http_replay.http_replay`)."""

    def __call__(self, requests: Sequence[TrafficRequest], *, slo: SloConfig | None = None,
                 stop_after_misses: int | None = None,
                 progress: Callable[[int], None] | None = None) -> ReplayResult: ...


class WindowReplayer:
    """`measure`'s replay(scale): the window at a rate scale through `replay_fn`, summarized with its verdict.
    A replay stops once its probe's verdict is settled (`stop_after_misses` for `plan.repeats`)."""

    def __init__(self, replay_fn: ReplayFn, requests: Sequence[TrafficRequest], plan: MeasurePlan,
                 progress: Progress, peak_memory_gb: Callable[[], float]) -> None:
        self.replay_fn, self.requests, self.slo, self.progress = replay_fn, requests, plan.slo, progress
        self.peak_memory_gb = peak_memory_gb
        self.count = 0
        self.stop_after = stop_after_misses(len(requests), plan.slo, plan.repeats)

    @property
    def span_s(self) -> float:
        """The window's length at its recorded rate (x1): first arrival to last."""
        return self.requests[-1].arrival_s - self.requests[0].arrival_s

    def warm_up(self, n: int) -> None:
        """The first `n` requests at once, unmeasured: kernels compiled (or a server's caches warm)."""
        if n > 0:
            self.replay_fn(tuple(replace(r, arrival_s=0.0) for r in self.requests[:n]))

    def __call__(self, scale: float) -> ReplaySummary:
        self.count += 1
        number, total = self.count, len(self.requests)
        return self._replay(scale, lambda done: self.progress(number, scale, done, total))

    def quiet(self, scale: float) -> ReplaySummary:
        """A replay beside others (`measure.Fan`): no progress of its own, several bars would overwrite each other."""
        return self._replay(scale, None)

    def _replay(self, scale: float, progress: Callable[[int], None] | None) -> ReplaySummary:
        result = self.replay_fn(rebase(self.requests, scale), slo=self.slo, stop_after_misses=self.stop_after,
                                progress=progress)
        return replay_summary(result, scale, self.slo, self.peak_memory_gb())


def measure_window(replay_fn: ReplayFn, requests: Sequence[TrafficRequest], plan: MeasurePlan, progress: Progress,
                   peak_memory_gb: Callable[[], float], checkpoint: Checkpoint | None = None,
                   fan: Fan = ONE_AT_A_TIME) -> tuple[Measurement, Probe | None]:
    """The window measured as `plan` says through `replay_fn`: `plan.warmup_requests` replayed unmeasured first,
    then `measure.measure`, `fan.width` probes at once where the path allows (their replays quiet). The
    measurement, and the checkpoint probe when the checkpoint stopped it."""
    replayer = WindowReplayer(replay_fn, requests, plan, progress, peak_memory_gb)
    replayer.warm_up(plan.warmup_requests)
    return measure(replayer, plan, replayer.span_s, checkpoint, fan._replace(replay=replayer.quiet))
