"""A trial's outcome, for every executor (the worker's `executors.run`, the simulator's `executors.sim`, a
server's `executors.http`): a measurement that ran (ok, or pruned at its checkpoint), a probe's figures, a
failure in one line, and the metrics a trial records. No torch."""

from __future__ import annotations

import traceback

from tuner.config import ObjectiveName
from tuner.measure.job import Measurement, Probe, QualityResult, TrialOutcome, TrialStatus
from tuner.measure.plan import Rates


def measured_outcome(measurement: Measurement, stopped_at: Probe | None, quality: QualityResult | None,
                     setup_s: float, reused: bool) -> TrialOutcome:
    """A measurement that ran: ok, or pruned at its checkpoint."""
    if stopped_at is not None:
        return TrialOutcome(TrialStatus.pruned, measurement,
                            f"fails the SLO at the incumbent's capacity ({probe_figures(stopped_at)})",
                            quality, setup_s, reused, stopped_at)
    return TrialOutcome(TrialStatus.ok, measurement, None, quality, setup_s, reused)


def probe_figures(probe: Probe) -> str:
    """`x<scale>: attainment <a>`, and for a lone replay stopped at its failure how much of the window it replayed:
    its attainment counts the requests it never replayed as misses."""
    line = f"x{probe.scale:.4g}: attainment {probe.median('slo_attainment'):.3f}"
    first = probe.replays[0].metrics
    if len(probe.replays) == 1 and first.get("stopped"):
        replayed = first["completed"] + first["rejections"]
        line += f", stopped once certain to fail: {replayed:.0f} of {first['requests']:.0f} requests replayed"
    return line


def short_error(e: BaseException) -> str:
    return str(e).splitlines()[0][:300] if str(e) else type(e).__name__


def describe_failure(e: BaseException) -> str:
    """`Type: message (at file:line)`: enough to find the failing line without a full traceback."""
    frames = traceback.extract_tb(e.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(e).__name__}: {short_error(e)}{where}"


def trial_metrics(objective: ObjectiveName, outcome: TrialOutcome, rates: Rates) -> dict[str, float]:
    """The metrics a trial records: the measurement's, capacity in req/s; `partial_` when it was stopped."""
    if outcome.measurement is None:
        return {}
    metrics = dict(outcome.measurement.metrics)
    if objective is ObjectiveName.capacity:
        metrics |= rates.capacity(outcome.measurement.values[0])
        metrics["saturated"] = float(outcome.measurement.saturated)
    if outcome.quality is not None:
        metrics |= {"quality_token_agreement": outcome.quality.token_agreement,
                    "quality_mean_kl": outcome.quality.mean_kl, "quality_sampling_tv": outcome.quality.sampling_tv}
        if outcome.quality.task_score is not None:
            metrics["quality_task_score"] = outcome.quality.task_score
    if outcome.status is not TrialStatus.ok:
        return {f"partial_{k}": v for k, v in metrics.items()}
    return metrics
