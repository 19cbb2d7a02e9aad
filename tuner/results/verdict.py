"""Best minus baseline with a confidence interval, and the verdict that follows from it.

Method: a paired t-interval. Each interleaved round measured the pick and the baseline back to back
on the proof window (the held-out one: replays that did not select the pick); the differences of
the rounds are the sample. The interval is mean(d) +- t(0.975, k-1) * sd(d) / sqrt(k), 95%
two-sided. "improved" only when the whole interval lies in the pick's favour; otherwise "no
significant improvement: keep the baseline", and the pick is recorded as the runner-up.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import NamedTuple

__all__ = ["CONFIDENCE", "Interval", "Saturation", "Verdict", "paired_interval", "t_quantile", "verdict",
           "with_latency"]

CONFIDENCE = 0.95
# t(0.975, df) for df = 1..30; beyond, the Cornish-Fisher expansion (error < 1e-4).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)
_Z975 = 1.959964


def t_quantile(df: int) -> float:
    """The 97.5% quantile of Student's t with `df` degrees of freedom."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


class Interval(NamedTuple):
    """pick - baseline over paired rounds, in the objective's unit."""

    mean: float
    low: float
    high: float
    rounds: int  # paired rounds used
    baseline_mean: float  # for the relative reading

    @property
    def relative(self) -> tuple[float, float, float]:
        """(mean, low, high) as fractions of the baseline's mean."""
        base = self.baseline_mean or math.nan
        return self.mean / base, self.low / base, self.high / base


def paired_interval(pick: Sequence[float | None], baseline: Sequence[float | None]) -> Interval | None:
    """The 95% paired t-interval of pick - baseline over rounds where both were measured; None under 2."""
    pairs = [(p, b) for p, b in zip(pick, baseline) if p is not None and b is not None]
    if len(pairs) < 2:
        return None
    diffs = [p - b for p, b in pairs]
    mean = statistics.fmean(diffs)
    half = t_quantile(len(diffs) - 1) * statistics.stdev(diffs) / math.sqrt(len(diffs))
    return Interval(mean, mean - half, mean + half, len(diffs), statistics.fmean(b for _, b in pairs))


class Verdict(NamedTuple):
    improved: bool
    headline: str  # one line, the same in the console, report.md, best.yaml and MLflow
    interval: Interval | None  # pick - baseline on the proof window
    method: str


class Saturation(NamedTuple):
    """Which config met the SLO at every rate the proof window allows, in some round: its values there are
    lower bounds of its capacity, not measurements of it."""

    pick: bool = False
    baseline: bool = False


def verdict(pick_is_baseline: bool, interval: Interval | None, unit: str, window: str,
            higher_is_better: bool = True, saturated: Saturation | None = None) -> Verdict:
    """The study's verdict from the proof window's interval.

    A saturated baseline makes pick - baseline an overestimate: no improvement can be claimed. A saturated
    pick alone makes it an underestimate: an interval clear of zero still proves the improvement, whose
    size is then a lower bound.
    """
    saturated = saturated or Saturation()
    if pick_is_baseline:
        return Verdict(False, "no improvement: the baseline measured best; keep the baseline", None,
                       "no proof needed: the baseline had the best median of the selection rounds")
    method = (f"paired t-interval ({CONFIDENCE:.0%}) over {interval.rounds if interval else 0} interleaved "
              f"rounds on the {window} window")
    if saturated.baseline:
        return Verdict(False, f"no significant improvement: keep the baseline (it meets the SLO at every rate the "
                       f"{window} window allows, so no difference can be shown there; replay a longer window)",
                       interval, method)
    if interval is None:
        return Verdict(False, "no significant improvement: keep the baseline (fewer than 2 paired rounds "
                       "measured on the proof window)", None, method)
    favourable = interval.low > 0 if higher_is_better else interval.high < 0
    text = _difference(interval, unit)
    if favourable and saturated.pick:
        return Verdict(True, f"improved, by at least: {text} (the pick met the SLO at every rate the {window} "
                       "window allows)", interval, method)
    if favourable:
        return Verdict(True, f"improved: {text}", interval, method)
    return Verdict(False, f"no significant improvement: keep the baseline (pick - baseline {text})", interval, method)


def with_latency(throughput: Verdict, latency: Interval | None) -> Verdict:
    """Pareto's verdict: output tokens/s and E2E p99, both. The throughput verdict stands only where the pick's
    p99 is not shown worse (pick - baseline p99 with its interval clear of zero upwards); the headline says both."""
    if throughput.interval is None:
        return throughput
    if latency is None:
        return Verdict(False, "no significant improvement: keep the baseline (E2E p99 not compared: fewer than 2 "
                       f"paired rounds; throughput {throughput.headline})", throughput.interval, throughput.method)
    rel, low, high = latency.relative
    text = (f"E2E p99 {latency.mean:+.4g} s ({rel:+.1%}; 95% CI {latency.low:+.4g} .. {latency.high:+.4g} s, "
            f"{low:+.1%} .. {high:+.1%})")
    method = f"{throughput.method}; both objectives: output tok/s and E2E p99"
    if not throughput.improved:
        return Verdict(False, f"{throughput.headline}; {text}", throughput.interval, method)
    if latency.low > 0:
        return Verdict(False, f"no significant improvement: keep the baseline (the pick's {text} is worse; "
                       f"throughput {throughput.headline})", throughput.interval, method)
    return Verdict(throughput.improved, f"{throughput.headline}; {text}, not worse", throughput.interval, method)


def _difference(interval: Interval, unit: str) -> str:
    """The difference with its interval, also relative to the baseline where that is defined (not against 0)."""
    rel, low, high = interval.relative
    ci = f"95% CI {interval.low:+.4g} .. {interval.high:+.4g} {unit}"
    if not all(math.isfinite(v) for v in (rel, low, high)):  # a baseline of 0: no relative difference
        return f"{interval.mean:+.4g} {unit} ({ci}; the baseline measured 0)"
    return f"{interval.mean:+.4g} {unit} ({rel:+.1%}; {ci}, {low:+.1%} .. {high:+.1%})"
