"""The Optuna objective: one trial's config measured in the worker, recorded in Optuna and MLflow.

Per trial: knob values -> `EngineConfig` (the baseline trial runs the baseline config) -> a
`TrialJob` whose plan starts the capacity search at the incumbent's capacity -> the executor ->
constraints, user attrs, the MLflow child run -> the objective value(s), a pruned trial, or a
failure with its reason.

Values are in the units people read: capacity in req/s of the replayed window (its rate scale x
its arrival rate), goodput in req/s, Pareto (output tok/s, p99 E2E s).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import optuna
import yaml
from optuna.trial import TrialState

from runtime import EngineConfig
from tuner.config import AppConfig, ObjectiveName, PrunerName
from tuner.executors.base import Executor
from tuner.interrupts import Interrupted, Interrupts
from tuner.measure.job import Probe, TrialJob, TrialOutcome, TrialStatus
from tuner.measure.outcome import trial_metrics
from tuner.measure.plan import Rates, plan_for
from tuner.search.samplers import CHECKPOINT_STEP, INCUMBENT_ATTR
from tuner.search.space import SearchSpace
from tuner.search.study import TrialFailed, TrialInterrupted, requeue
from tuner.store.heartbeat import JournalHeartbeat
from tuner.store.record import INTERRUPTED, feasible, is_baseline
from tuner.tracking import STATUS_TAG, RunState
from tuner.traffic import ReplayWindow

__all__ = ["FAILED", "TrialRunner"]

FAILED = (TrialStatus.error, TrialStatus.oom, TrialStatus.timeout, TrialStatus.died)


@dataclass
class TrialRunner:
    """The Optuna objective: one trial in the executor, recorded in Optuna and MLflow."""

    app: AppConfig
    space: SearchSpace
    executor: Executor
    window: ReplayWindow
    rates: Rates
    baseline: EngineConfig  # what the baseline trial runs
    tracker: Any  # Tracker | FallbackTracker
    parent_run_id: str
    on_trial_end: Callable[[optuna.trial.Trial, TrialOutcome, dict[str, float]], None] | None = None
    on_progress: Callable[[int, int, float, int, int], None] | None = None  # (trial, probe, scale, done, total)
    heartbeat: JournalHeartbeat | None = None  # journal storage only: RDB storage beats by itself
    interrupts: Interrupts | None = None  # a signal stops the study: the running trial is re-queued
    on_stale: Callable[[optuna.Study, optuna.trial.FrozenTrial], None] | None = None  # a dead worker's trial
    figures: str = "measured"  # what the trials' figures are (simulated: from which profile), tagged on each run

    def fail_stale(self, study: optuna.Study) -> None:
        """Fail (and re-queue) trials whose worker died; RDB storage does it through its heartbeats."""
        if self.heartbeat is not None:
            self.heartbeat.fail_stale(study, None)
        else:
            optuna.storages.fail_stale_trials(study)
        self._fail_overdue(study)

    def _fail_overdue(self, study: optuna.Study) -> None:
        """A RUNNING trial older than a live one can be (its timeout and the grace period) has no worker, even
        one without a heartbeat to go stale (killed before its first beat): failed and handed over the same way."""
        bound = timedelta(seconds=self.app.tuner.trial_timeout_s + self.app.storage.grace_period_s)
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if t.datetime_start is not None and datetime.now() - t.datetime_start > bound:
                study.tell(t.number, state=TrialState.FAIL, skip_if_finished=True)
                if self.on_stale is not None:
                    self.on_stale(study, t)

    def __call__(self, trial: optuna.trial.Trial) -> list[float]:
        if self.interrupts is not None and self.interrupts.requested:  # came between two trials
            raise self._interrupted(trial, None)
        if self.heartbeat is not None:
            self.heartbeat.fail_stale(trial.study, running=trial.number)
        values = self.space.suggest(trial, self.app.runtime)
        config = self.baseline if is_baseline(trial) else self.space.apply(self.app.runtime, values)
        incumbent = self._incumbent(trial.study)
        trial.set_user_attr(INCUMBENT_ATTR, incumbent)
        start = None if incumbent is None else incumbent / self.rates.window_rps
        checkpoint = self.app.tuner.pruner is PrunerName.incumbent
        job = TrialJob(trial.number, config, self.app.quality if config.changes_numerics else None, self.window.key,
                       plan_for(self.app, start, repeats=self.app.tuner.repeats, checkpoint=checkpoint))
        config_yaml = yaml.safe_dump({"runtime": config.to_dict(), "knobs": values}, sort_keys=False)
        run_id = self.tracker.begin_trial(self.parent_run_id, trial.number, values, config_yaml,
                                          {"pagetune.baseline": str(is_baseline(trial)).lower(),
                                           "pagetune.figures": self.figures})
        beating = self.heartbeat.beating(trial) if self.heartbeat else contextlib.nullcontext()
        with beating:
            try:
                outcome = self.executor.run(job, self.window.requests, lambda *p: self._progress(trial, *p),
                                            lambda probe: self._checkpoint(trial, probe, incumbent),
                                            self.app.tuner.trial_timeout_s)
            except Interrupted:
                raise self._interrupted(trial, run_id) from None
        metrics = trial_metrics(self.app.tuner.objective, outcome, self.rates)
        self._record(trial, outcome, config, metrics)
        self.tracker.end_trial(run_id, metrics, _run_state(outcome.status), outcome.reason,
                               list(outcome.measurement.latency_rows) if outcome.measurement else [],
                               {STATUS_TAG: outcome.status.value})
        if self.on_trial_end:
            self.on_trial_end(trial, outcome, metrics)
        if outcome.status in FAILED:
            raise TrialFailed(f"trial {trial.number} {outcome.status.value}: {outcome.reason}")
        if outcome.status is TrialStatus.pruned:
            raise optuna.TrialPruned(outcome.reason)
        return self._values(outcome)

    def _interrupted(self, trial: optuna.trial.Trial, run_id: str | None) -> TrialInterrupted:
        """Record a trial a signal stopped (Optuna fails it on the raise) and queue its parameters again."""
        trial.set_user_attr("status", INTERRUPTED)
        trial.set_user_attr("reason", INTERRUPTED)
        if run_id is not None:
            self.tracker.end_trial(run_id, {}, RunState.KILLED, INTERRUPTED, [], {STATUS_TAG: INTERRUPTED})
        requeue(trial.study, next(t for t in trial.study.get_trials(deepcopy=False) if t.number == trial.number))
        return TrialInterrupted(f"trial {trial.number} {INTERRUPTED}")

    def _incumbent(self, study: optuna.Study) -> float | None:
        """The best feasible capacity so far (req/s): where a capacity trial's search starts."""
        if self.app.tuner.objective is not ObjectiveName.capacity:
            return None
        done = [t.values[0] for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                if feasible(t) and t.values and t.values[0] > 0]
        return max(done, default=None)

    def _values(self, outcome: TrialOutcome) -> list[float]:
        """The objective value(s); an infeasible trial (no measurement) completes at the worst value, its
        violated constraint telling the sampler why."""
        if outcome.measurement is None:
            return [0.0, math.inf] if self.app.tuner.objective is ObjectiveName.pareto else [0.0]
        values = list(outcome.measurement.values)
        if self.app.tuner.objective is ObjectiveName.capacity:
            values = [values[0] * self.rates.window_rps]
        return values

    def _progress(self, trial: optuna.trial.Trial, probe: int, scale: float, done: int, total: int) -> None:
        if self.on_progress is not None:
            self.on_progress(trial.number, probe, scale, done, total)

    def _checkpoint(self, trial: optuna.trial.Trial, probe: Probe, incumbent: float | None) -> bool:
        """Report the probe at the incumbent's capacity as an estimate of this trial's: below it when it failed."""
        if incumbent is None:
            return True
        attainment = probe.median("slo_attainment")
        estimate = incumbent if probe.passed else incumbent * attainment / self.app.slo.attainment
        trial.report(estimate, CHECKPOINT_STEP)
        return not trial.should_prune()

    def _record(self, trial: optuna.trial.Trial, outcome: TrialOutcome, config: EngineConfig,
                metrics: dict[str, float]) -> None:
        """Constraints (feasible when <= 0) and user attrs: the results read them back from the storage."""
        cannot_start = outcome.status is TrialStatus.infeasible and outcome.quality is None
        trial.set_constraint("memory", 1.0 if cannot_start else -1.0)  # e.g. too little memory for the config
        trial.set_constraint("quality", outcome.quality.violation(self.app.quality) if outcome.quality else -1.0)
        if self.app.tuner.objective is ObjectiveName.goodput and outcome.measurement is not None:
            trial.set_constraint("slo", self.app.slo.attainment - outcome.measurement.metrics["slo_attainment"])
        trial.set_user_attr("runtime", config.to_dict())
        trial.set_user_attr("status", outcome.status.value)
        trial.set_user_attr("reason", outcome.reason)
        trial.set_user_attr("metrics", {k: v for k, v in metrics.items() if v == v and abs(v) != math.inf})
        trial.set_user_attr("setup_s", outcome.setup_s)
        trial.set_user_attr("model_reused", outcome.model_reused)


def _run_state(status: TrialStatus) -> RunState:
    if status in FAILED:
        return RunState.FAILED
    return RunState.FINISHED  # a pruned trial too: it ran as planned and stopped (its reason tagged), not a crash
