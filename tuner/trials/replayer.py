"""`measure`'s replay(scale) over one engine, and a measurement's outcome: shared by the worker's trials
(`tuner.trials.run`, the real engine) and the simulator's (`tuner.trials.sim`, in-process). No torch."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from runtime import LLMEngine
from tuner.traffic import TrafficRequest, rebase
from tuner.trials.job import Measurement, Probe, QualityResult, ReplaySummary, TrialJob, TrialOutcome, TrialStatus
from tuner.trials.metrics import decisive_failures, replay_summary
from tuner.trials.replay import ReplayClock, replay

OnProgress = Callable[[int, float, int, int], None]  # (probe number, rate scale, requests done, requests)


class WindowReplayer:
    """The window at a rate scale through the trial's one engine (reset before each replay)."""

    def __init__(self, engine: LLMEngine, clock: ReplayClock, requests: Sequence[TrafficRequest], job: TrialJob,
                 progress: OnProgress, peak_memory_gb: Callable[[], float]) -> None:
        self.engine, self.clock, self.requests, self.job = engine, clock, requests, job
        self.progress, self.peak_memory_gb = progress, peak_memory_gb
        self.count = 0
        self.stop_after = decisive_failures(len(requests), job.plan.slo)

    def warm_up(self, n: int) -> None:
        """The first `n` requests at once, unmeasured: kernels compiled for the step shapes a replay uses."""
        if n > 0:
            burst = tuple(replace(r, arrival_s=0.0) for r in self.requests[:n])
            replay(self.engine, self.clock, burst)

    def __call__(self, scale: float) -> ReplaySummary:
        self.count += 1
        number, total = self.count, len(self.requests)
        result = replay(self.engine, self.clock, rebase(self.requests, scale), slo=self.job.plan.slo,
                        stop_after_misses=self.stop_after,
                        progress=lambda done: self.progress(number, scale, done, total))
        return replay_summary(result, scale, self.job.plan.slo, self.peak_memory_gb())


def measured_outcome(measurement: Measurement, stopped_at: Probe | None, quality: QualityResult | None,
                     setup_s: float, reused: bool) -> TrialOutcome:
    """A measurement that ran: ok, or pruned at its checkpoint."""
    if stopped_at is not None:
        return TrialOutcome(TrialStatus.pruned, measurement, "fails the SLO at the incumbent's capacity "
                            f"(x{stopped_at.scale:.4g}: attainment {stopped_at.median('slo_attainment'):.3f})",
                            quality, setup_s, reused, stopped_at)
    return TrialOutcome(TrialStatus.ok, measurement, None, quality, setup_s, reused)
