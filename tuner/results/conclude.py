"""The study's conclusion: finalists re-measured, the pick, its proof, the verdict, what to export.

Every figure that the console, report.md, best.yaml and MLflow quote comes from here, so they say
the same thing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import NamedTuple

import optuna

from tuner.config import Measuring, ObjectiveName, ValidationConfig
from tuner.executors.base import Executor
from tuner.results.finalists import BASELINE, Candidate, Remeasured, choose, remeasure
from tuner.results.kept import KeptMeasurements
from tuner.results.no_capacity import (
    NoCapacity,
    empty_remeasured,
    measure_at_trace_rate,
    measures_zero,
    no_capacity_verdict,
)
from tuner.results.rounds import conclusion_rounds
from tuner.results.verdict import Saturation, Verdict, paired_interval, verdict, with_latency
from tuner.traffic import ReplayWindow

__all__ = ["Conclusion", "NoBaseline", "conclude", "measurements_planned", "objective_unit"]

log = logging.getLogger("pagetune")


class NoBaseline(RuntimeError):
    """The baseline trial did not complete: nothing to compare with."""


class Conclusion(NamedTuple):
    baseline: Candidate
    finalists: list[Candidate]  # the best distinct candidates of the search (the baseline apart)
    selection: Remeasured  # finalists and baseline, fresh interleaved rounds on the search window
    pick: Candidate  # the best median of `selection` (may be the baseline)
    proof: Remeasured  # pick and baseline, interleaved rounds on the proof window
    verdict: Verdict
    unit: str  # of every value: "req/s" (capacity, goodput) or "tok/s" (pareto's throughput)
    no_capacity: NoCapacity | None = None  # every config measured 0: their p99s at the trace's own rate, ranked

    @property
    def exported(self) -> Candidate:
        """What best.yaml holds: the pick when the verdict says improved, else the baseline."""
        return self.pick if self.verdict.improved else self.baseline

    @property
    def runner_up(self) -> Candidate | None:
        """The pick that was not exported (not significantly better than the baseline)."""
        return None if self.verdict.improved or self.pick.label == BASELINE else self.pick


def objective_unit(objective: ObjectiveName) -> str:
    return "tok/s" if objective is ObjectiveName.pareto else "req/s"


def conclude(executor: Executor, measuring: Measuring, validation: ValidationConfig, study: optuna.Study,
             search: ReplayWindow, held_out: ReplayWindow | None, on_done: Callable[[], None] = lambda: None,
             on_plan: Callable[[int], None] = lambda _: None) -> Conclusion:
    """Select, prove, judge. Every measurement is kept in `study` as it is made (`results.kept`): a rerun after a
    signal resumes here. `on_plan(n)`: the measurements this conclusion makes in all (once the finalists are
    known, and again once the pick is), `on_done()` after each."""
    baseline, finalists = choose(study, measuring.tuner)
    objective = measuring.tuner.objective
    if baseline is None:
        raise NoBaseline(f"study {study.study_name}: the baseline trial did not complete; see its failure "
                         "reason in the trial list above and in MLflow")
    candidates = [baseline, *finalists]
    if measures_zero(objective, candidates):  # nothing to select or prove: rank at the trace's own rate
        on_plan(len(candidates))  # one replay each, not the selection and proof the bar was sized for
        ranked = measure_at_trace_rate(executor, measuring, candidates, search, on_done)
        empty = empty_remeasured(search, candidates)
        return Conclusion(baseline, finalists, empty, baseline, empty, no_capacity_verdict(ranked, BASELINE),
                          objective_unit(objective), ranked)
    kept = KeptMeasurements(study)
    if kept.count():
        log.info("conclusion: resumed, %d measurements kept from an earlier run are not made again", kept.count())
    independent = measuring.tuner.fidelity == "sim+real"  # the search's values are simulated: no start from them
    rounds = conclusion_rounds(executor, validation)
    on_plan(measurements_planned(validation, len(finalists), executor))
    selection = remeasure(executor, measuring, candidates, search, rounds.select, on_done, kept, independent)
    medians = {c.label: selection.median(c.label) for c in candidates}
    pick = max(candidates, key=lambda c: -1.0 if medians[c.label] is None else medians[c.label])
    proof_window = held_out if held_out is not None else search
    pair = [pick, baseline] if pick is not baseline else [baseline]
    on_plan(rounds.select * len(candidates) + rounds.proof * len(pair))
    proof = remeasure(executor, measuring, pair, proof_window, rounds.proof, on_done, kept, independent)
    window = "held-out" if held_out is not None else "search (fresh rounds)"
    saturated = Saturation(pick=any(proof.saturated[pick.label]), baseline=any(proof.saturated[BASELINE]))
    if pick is baseline:
        judged = verdict(True, None, objective_unit(objective), window, saturated=saturated)
    else:
        interval = paired_interval(proof.values[pick.label], proof.values[BASELINE])
        judged = verdict(False, interval, objective_unit(objective), window, saturated=saturated)
        if objective is ObjectiveName.pareto:  # throughput and p99 latency, both
            judged = with_latency(judged, paired_interval(proof.latency[pick.label], proof.latency[BASELINE]))
    return Conclusion(baseline, finalists, selection, pick, proof, judged, objective_unit(objective))


def measurements_planned(validation: ValidationConfig, finalists: int, executor: Executor) -> int:
    """How many measurements `conclude` makes on `executor` with `finalists` finalists and a pick other than the
    baseline."""
    rounds = conclusion_rounds(executor, validation)
    return rounds.select * (finalists + 1) + rounds.proof * 2
