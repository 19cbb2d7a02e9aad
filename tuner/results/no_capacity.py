"""When every config measures capacity 0: no rate tried meets the SLO, for any of them.

A trace whose requests arrive in groups at one instant (a conversation log stamped to the second) can do
this: slowing it down cannot separate requests that arrive together, so their long prefills share steps
with decodes at every rate. The capacity search has nothing to rank, and selection and proof would only
measure zeros again. Instead each config (the baseline and the finalists) replays the window once at the
trace's own rate with no early stop, and the conclusion states per config:

    TTFT p99, TPOT p99   what the config reaches there (its tightest: lower rates cannot separate the groups)
    meets                the share of requests that meet the SLO there
    SLO load             the ratio to the SLO of the request at the attainment target (<= 1 meets it)

ranks the configs by their SLO load (lowest first), and proposes the SLO at which the best of them meets the
attainment target at the trace's own rate: the SLO at which a capacity search can rank configs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from tuner.config import Measuring, ObjectiveName, SloConfig
from tuner.executors.base import Executor
from tuner.measure.job import MeasurePlan, TrialJob, TrialStatus
from tuner.measure.metrics import at_attainment, meets_slo, slo_ratio
from tuner.results.finalists import Candidate, Remeasured
from tuner.results.verdict import Verdict
from tuner.traffic import ReplayWindow

__all__ = ["AtTraceRate", "NoCapacity", "empty_remeasured", "measure_at_trace_rate", "measures_zero",
           "no_capacity_verdict", "propose_slo"]

UNBOUNDED_S = 1e9  # an SLO no request misses: the replay runs to its end (a miss would stop it early)


class AtTraceRate(NamedTuple):
    """One config's replay of the window at the trace's own rate."""

    label: str
    ttft_p99_s: float
    tpot_p99_s: float
    meets: float  # share of the window's requests that meet the SLO
    load: float  # SLO ratio of the request at the attainment target; <= 1 meets the SLO
    rows: tuple[dict[str, Any], ...]  # per-request latencies


class NoCapacity(NamedTuple):
    ranking: list[AtTraceRate]  # best (lowest SLO load) first
    proposed: SloConfig | None  # the SLO the best config meets at the trace's own rate; None: none replayed
    rate_rps: float  # the window's own rate, as replayed
    failed: list[str]  # replays that did not complete, with reasons

    @property
    def best(self) -> AtTraceRate | None:
        return self.ranking[0] if self.ranking else None


def measures_zero(objective: ObjectiveName, candidates: Sequence[Candidate]) -> bool:
    """Capacity: every config's search measured 0 (no rate tried met the SLO)."""
    return objective is ObjectiveName.capacity and all(c.search_value <= 0 for c in candidates)


def measure_at_trace_rate(executor: Executor, measuring: Measuring, candidates: Sequence[Candidate],
                          window: ReplayWindow, on_done: Callable[[], None] = lambda: None) -> NoCapacity:
    """One unstopped replay per config at the window's own rate, ranked by SLO load."""
    unbounded = dataclasses.replace(measuring.slo, ttft_s=UNBOUNDED_S, tpot_s=UNBOUNDED_S, e2e_s=None)
    plan = MeasurePlan(ObjectiveName.goodput, unbounded, repeats=1, warmup_requests=measuring.tuner.warmup_requests)
    done: list[AtTraceRate] = []
    failed: list[str] = []
    for c in candidates:
        job = TrialJob(-1, c.config, None, window.key, plan)
        outcome = executor.run(job, window.requests, lambda *_: None, lambda _: True, measuring.tuner.trial_timeout_s)
        on_done()
        if outcome.status is not TrialStatus.ok or outcome.measurement is None:
            failed.append(f"{c.label} at the trace's own rate: {outcome.status.value}: {outcome.reason}")
            continue
        m = outcome.measurement
        done.append(_at_trace_rate(c.label, m.metrics, m.latency_rows, measuring.slo))
    ranking = sorted(done, key=lambda a: a.load)  # stable: the baseline first among equals
    proposed = propose_slo(ranking[0].rows, measuring.slo) if ranking else None
    return NoCapacity(ranking, proposed, window.rate_rps, failed)


def _at_trace_rate(label: str, metrics: dict[str, float], rows: Sequence[dict[str, Any]],
                   slo: SloConfig) -> AtTraceRate:
    meets = sum(meets_slo(r, slo) for r in rows) / max(1, len(rows))
    return AtTraceRate(label, metrics["ttft_p99_s"], metrics["tpot_p99_s"], meets,
                       at_attainment([slo_ratio(r, slo) for r in rows], slo.attainment), tuple(rows))


def propose_slo(rows: Sequence[dict[str, Any]], slo: SloConfig) -> SloConfig:
    """The SLO these requests meet at its attainment target: each bound kept where it holds, else raised to the
    value at the target (rounded up to 2 significant digits); both raised by the joint ratio if that is short."""
    ttft = max(slo.ttft_s, _round_up(at_attainment([r["ttft_s"] for r in rows], slo.attainment)))
    tpot = max(slo.tpot_s, _round_up(at_attainment([r["tpot_s"] for r in rows], slo.attainment)))
    proposed = dataclasses.replace(slo, ttft_s=ttft, tpot_s=tpot)
    if sum(meets_slo(r, proposed) for r in rows) < slo.attainment * len(rows) - 1e-9:
        load = at_attainment([slo_ratio(r, proposed) for r in rows], slo.attainment)
        proposed = dataclasses.replace(proposed, ttft_s=_round_up(ttft * load), tpot_s=_round_up(tpot * load))
    return proposed


def _round_up(value: float) -> float:
    """Up to 2 significant digits (0.2013 -> 0.21, 2.38 -> 2.4); inf stays inf."""
    if not math.isfinite(value) or value <= 0:
        return value
    unit = 10.0 ** (math.floor(math.log10(value)) - 1)
    return round(math.ceil(value / unit - 1e-9) * unit, 12)


def empty_remeasured(window: ReplayWindow, candidates: Sequence[Candidate]) -> Remeasured:
    """Selection and proof that did not run (every config measured 0): no rounds for any of them."""
    labels = [c.label for c in candidates]
    return Remeasured(window.key, {k: [] for k in labels}, {k: [] for k in labels}, {}, [], {k: [] for k in labels})


def no_capacity_verdict(result: NoCapacity, baseline_label: str) -> Verdict:
    best = result.best
    rank = (f"; {best.label} comes closest at the trace's own rate (ranking in the report)"
            if best is not None and best.label != baseline_label else "")
    return Verdict(False, f"no capacity: no config meets the SLO at any rate tried; keep the baseline{rank}", None,
                   "no selection or proof: every config measured 0; one replay per config at the trace's own rate, "
                   "ranked by SLO load")
