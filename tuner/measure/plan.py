"""A trial's measurement plan from the study's settings, and how a rate scale reads in req/s."""

from __future__ import annotations

import math
from typing import NamedTuple

from tuner.config import AppConfig
from tuner.measure.job import MeasurePlan

__all__ = ["Rates", "plan_for"]


class Rates(NamedTuple):
    """How a rate scale reads for the search window and for the trace."""

    window_rps: float  # the window's arrival rate as replayed: scale 1.0
    recorded_rps: float  # the same window's rate as logged (replay.time_scale undone)
    peak_rps: float  # the trace's peak arrival rate over 60 s, as logged

    def capacity(self, scale: float) -> dict[str, float]:
        rps = scale * self.window_rps
        return {"capacity_rps": rps, "capacity_scale": scale, "capacity_x_trace": rps / self.recorded_rps,
                "replicas_at_peak": float(math.ceil(self.peak_rps / rps)) if rps > 0 else math.inf}


def plan_for(app: AppConfig, start_scale: float | None, *, repeats: int, checkpoint: bool) -> MeasurePlan:
    """A trial's measurement plan: with a start (the incumbent's or the config's own capacity) the
    bracket steps finely around it; without one it starts at the window's own rate, doubling."""
    first_step = 2.0 if start_scale is None else 1.0 + 4 * app.tuner.capacity_tol
    return MeasurePlan(app.tuner.objective, app.slo, repeats, start_scale or 1.0, first_step, app.tuner.capacity_tol,
                       checkpoint and start_scale is not None, app.tuner.warmup_requests, app.replay.min_window_s)
