"""A measurement's outcome, shared by the worker's trials (`tuner.trials.run`, the real engine) and the
simulator's (`tuner.trials.sim`, in-process); the replay over an engine is `measure.WindowReplayer` with
`engine_replay`; a failure in one line. No torch."""

from __future__ import annotations

import functools
import traceback
from collections.abc import Callable

from runtime import LLMEngine
from tuner.trials.job import Measurement, Probe, QualityResult, TrialOutcome, TrialStatus
from tuner.trials.replay import ReplayClock, replay


def engine_replay(engine: LLMEngine, clock: ReplayClock, poll: Callable[[], None] | None = None):
    """`WindowReplayer`'s replay function over one engine (reset before each replay); `poll` before every step."""
    return functools.partial(replay, engine, clock, poll=poll)


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
