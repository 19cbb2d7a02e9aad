"""The host time of an engine step: what the step-time model leaves out (numpy, no torch).

The step-time model predicts a step's forward and sampling, which is what the profile command and the
real engine's step log time. A real step costs more: the scheduler plans it, the engine turns its tokens
into outputs, and the replay loop admits arrivals before the next step. That host time grows with the
sequences a step schedules:

    host_s = const_s + per_seq_s * scheduled sequences

It is fitted by least squares (the mean, not the median: every host second delays the next step) on
steps of the real engine under a replay (`runtime.step_log`), by a refit (`runtime.sim.refit`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import numpy as np


class HostModel(NamedTuple):
    const_s: float = 0.0
    per_seq_s: float = 0.0

    def predict(self, seqs: int) -> float:
        return max(0.0, self.const_s + self.per_seq_s * seqs)

    def line(self) -> str:
        return f"{self.const_s * 1e3:.3f} ms + {self.per_seq_s * 1e6:.2f} us per scheduled sequence"


def fit_host(points: Iterable[tuple[int, float]]) -> HostModel:
    """Least squares over (scheduled sequences, host seconds); one distinct count fits the constant alone."""
    pts = [(float(n), float(s)) for n, s in points]
    if not pts:
        return HostModel()
    x = np.array([[1.0, n] for n, _ in pts])
    y = np.array([s for _, s in pts])
    if len({n for n, _ in pts}) == 1:
        return HostModel(float(y.mean()), 0.0)
    (const, per_seq), *_ = np.linalg.lstsq(x, y, rcond=None)
    return HostModel(float(const), float(per_seq))
