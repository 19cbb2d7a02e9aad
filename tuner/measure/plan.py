"""A trial's measurement plan from the study's settings (`Measuring`), a re-measurement's dithered start, and how a
rate scale reads in req/s."""

from __future__ import annotations

import math
import random
from typing import NamedTuple

from tuner.config import Measuring
from tuner.measure.job import MeasurePlan
from tuner.measure.measure import highest_scale

__all__ = ["Rates", "dither", "plan_for", "top_start"]


class Rates(NamedTuple):
    """How a rate scale reads for the search window and for the trace."""

    window_rps: float  # the window's arrival rate as replayed: scale 1.0
    recorded_rps: float  # the same window's rate as logged (replay.time_scale undone)
    peak_rps: float  # the trace's peak arrival rate over 60 s, as logged

    def capacity(self, scale: float) -> dict[str, float]:
        rps = scale * self.window_rps
        return {"capacity_rps": rps, "capacity_scale": scale, "capacity_x_trace": rps / self.recorded_rps,
                "replicas_at_peak": float(math.ceil(self.peak_rps / rps)) if rps > 0 else math.inf}


def plan_for(measuring: Measuring, start_scale: float | None, *, repeats: int, checkpoint: bool) -> MeasurePlan:
    """A trial's measurement plan: with a start (the incumbent's or the config's own capacity) the
    bracket steps finely around it; without one it starts at the window's own rate, doubling."""
    tuner = measuring.tuner
    first_step = 2.0 if start_scale is None else 1.0 + 4 * tuner.capacity_tol
    return MeasurePlan(tuner.objective, measuring.slo, repeats, start_scale or 1.0, first_step, tuner.capacity_tol,
                       checkpoint and start_scale is not None, tuner.warmup_requests, measuring.min_window_s,
                       tuner.edge_checks)


def dither(measuring: Measuring, key: str) -> float:
    """A start factor in [1/(1+tol), 1+tol], seeded by the measurement's identity: bisections that all began at
    one point would land on one grid and repeat each other's values (a zero spread the interval would believe)."""
    u = random.Random(f"{measuring.tuner.seed}/{key}").uniform(-1.0, 1.0)
    return (1.0 + measuring.tuner.capacity_tol) ** u


def top_start(measuring: Measuring, span_s: float, key: str) -> float:
    """Where a capacity search that may not start from another figure (a simulated one) begins: just below the
    fastest rate the window can show (`highest_scale`), dithered downwards. A probe above the capacity stops at
    its first decisive miss, so bracketing down from there costs seconds of replay, where doubling up from the
    window's own rate replays the whole window once at its recorded pace."""
    top = highest_scale(span_s, measuring.min_window_s)
    return top * dither(measuring, key) / (1.0 + measuring.tuner.capacity_tol)
