"""A measurement's outcome, shared by the worker's trials (`tuner.trials.run`, the real engine) and the
simulator's (`tuner.trials.sim`, in-process); the replay over an engine is `measure.WindowReplayer` with
`engine_replay`. No torch."""

from __future__ import annotations

import functools

from runtime import LLMEngine
from tuner.trials.job import Measurement, Probe, QualityResult, TrialOutcome, TrialStatus
from tuner.trials.replay import ReplayClock, replay


def engine_replay(engine: LLMEngine, clock: ReplayClock):
    """`WindowReplayer`'s replay function over one engine (reset before each replay)."""
    return functools.partial(replay, engine, clock)


def measured_outcome(measurement: Measurement, stopped_at: Probe | None, quality: QualityResult | None,
                     setup_s: float, reused: bool) -> TrialOutcome:
    """A measurement that ran: ok, or pruned at its checkpoint."""
    if stopped_at is not None:
        return TrialOutcome(TrialStatus.pruned, measurement, "fails the SLO at the incumbent's capacity "
                            f"(x{stopped_at.scale:.4g}: attainment {stopped_at.median('slo_attainment'):.3f})",
                            quality, setup_s, reused, stopped_at)
    return TrialOutcome(TrialStatus.ok, measurement, None, quality, setup_s, reused)
