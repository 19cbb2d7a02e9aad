"""The study's conclusion: finalists re-measured, the pick, its proof, the verdict, what to export.

Every figure that the console, report.md, best.yaml and MLflow quote comes from here, so they say
the same thing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import optuna

from tuner.config import AppConfig, ObjectiveName
from tuner.results.finalists import BASELINE, Candidate, Remeasured, choose, remeasure
from tuner.results.rounds import conclusion_rounds
from tuner.results.verdict import Saturation, Verdict, paired_interval, verdict
from tuner.traffic import ReplayWindow
from tuner.trials.supervisor import Executor

__all__ = ["Conclusion", "NoBaseline", "conclude", "measurements_planned", "objective_unit"]


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

    @property
    def exported(self) -> Candidate:
        """What best.yaml holds: the pick when the verdict says improved, else the baseline."""
        return self.pick if self.verdict.improved else self.baseline

    @property
    def runner_up(self) -> Candidate | None:
        """The pick that was not exported (not significantly better than the baseline)."""
        return None if self.verdict.improved or self.pick.label == BASELINE else self.pick


def objective_unit(app: AppConfig) -> str:
    return "tok/s" if app.tuner.objective is ObjectiveName.pareto else "req/s"


def conclude(executor: Executor, app: AppConfig, study: optuna.Study, search: ReplayWindow,
             held_out: ReplayWindow | None, on_done: Callable[[], None] = lambda: None) -> Conclusion:
    baseline, finalists = choose(study, app)
    if baseline is None:
        raise NoBaseline(f"study {study.study_name}: the baseline trial did not complete; see its failure "
                         "reason in the trial list above and in MLflow")
    rounds = conclusion_rounds(executor, app.validation)
    selection = remeasure(executor, app, [baseline, *finalists], search, rounds.select, on_done)
    medians = {c.label: selection.median(c.label) for c in [baseline, *finalists]}
    pick = max([baseline, *finalists], key=lambda c: -1.0 if medians[c.label] is None else medians[c.label])
    proof_window = held_out if held_out is not None else search
    pair = [pick, baseline] if pick is not baseline else [baseline]
    proof = remeasure(executor, app, pair, proof_window, rounds.proof, on_done)
    interval = paired_interval(proof.values[pick.label], proof.values[BASELINE]) if pick is not baseline else None
    window = "held-out" if held_out is not None else "search (fresh rounds)"
    saturated = Saturation(pick=any(proof.saturated[pick.label]), baseline=any(proof.saturated[BASELINE]))
    return Conclusion(baseline, finalists, selection, pick, proof,  # every objective's value: higher is better
                      verdict(pick is baseline, interval, objective_unit(app), window, saturated=saturated),
                      objective_unit(app))


def measurements_planned(app: AppConfig, finalists: int, executor: Executor) -> int:
    """How many measurements `conclude` makes at most on `executor` (for a progress bar)."""
    rounds = conclusion_rounds(executor, app.validation)
    return rounds.select * (finalists + 1) + rounds.proof * 2
