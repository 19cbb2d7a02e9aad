"""The Optuna objective: one trial's config measured by the executor, recorded in Optuna and MLflow.

Per trial: knob values -> `EngineConfig` (the baseline trial runs the baseline config) -> a
`TrialJob` whose plan starts the capacity search at the incumbent's capacity -> the executor ->
constraints, user attrs, the MLflow child run -> the objective value(s), a pruned trial, or a
failure with its reason. The trial's MLflow run is `search.recorder`'s; stale trials (a dead worker's) are
`search.stale`'s, a callback of `run_search`, as Optuna composes `study.optimize(objective, callbacks=...)`.

Values are in the units people read: capacity in req/s of the replayed window (its rate scale x
its arrival rate), goodput in req/s, Pareto (output tok/s, p99 E2E s).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass

import optuna
from optuna.trial import TrialState

from runtime import EngineConfig
from tuner.config import Measuring, ObjectiveName, PrunerName, QualityConfig
from tuner.executors.base import Executor
from tuner.interrupts import Interrupted, Interrupts
from tuner.measure.job import Probe, TrialJob, TrialOutcome, TrialStatus
from tuner.measure.outcome import trial_metrics
from tuner.measure.plan import Rates, plan_for
from tuner.search.recorder import FAILED, TrialRecorder
from tuner.search.samplers import CHECKPOINT_STEP, INCUMBENT_ATTR
from tuner.search.space import SearchSpace
from tuner.search.study import TrialFailed, TrialInterrupted, requeue
from tuner.store.heartbeat import JournalHeartbeat
from tuner.store.record import INTERRUPTED, feasible, is_baseline
from tuner.traffic import ReplayWindow

__all__ = ["Objective"]


@dataclass
class Objective:
    """The Optuna objective: one trial in the executor, recorded in Optuna and (through `recorder`) in MLflow."""

    measuring: Measuring  # tuner.*, slo, replay.min_window_s
    runtime: EngineConfig  # what every trial's config starts from
    quality: QualityConfig  # the guardrail, for a config that changes numerics
    space: SearchSpace
    executor: Executor
    window: ReplayWindow
    rates: Rates
    baseline: EngineConfig  # what the baseline trial runs
    recorder: TrialRecorder  # the trial's MLflow run
    on_trial_end: Callable[[optuna.trial.Trial, TrialOutcome, dict[str, float]], None] | None = None
    on_progress: Callable[[int, int, float, int, int], None] | None = None  # (trial, probe, scale, done, total)
    heartbeat: JournalHeartbeat | None = None  # journal storage only: RDB storage beats by itself
    interrupts: Interrupts | None = None  # a signal stops the study: the running trial is re-queued

    def __call__(self, trial: optuna.trial.Trial) -> list[float]:
        if self.interrupts is not None and self.interrupts.requested:  # came between two trials
            raise self._interrupted(trial, None)
        if self.heartbeat is not None:
            self.heartbeat.fail_stale(trial.study, running=trial.number)
        values = self.space.suggest(trial, self.runtime)
        config = self.baseline if is_baseline(trial) else self.space.apply(self.runtime, values)
        incumbent = self._incumbent(trial.study)
        trial.set_user_attr(INCUMBENT_ATTR, incumbent)
        start = None if incumbent is None else incumbent / self.rates.window_rps
        tuner = self.measuring.tuner
        job = TrialJob(trial.number, config, self.quality if config.changes_numerics else None, self.window.key,
                       plan_for(self.measuring, start, repeats=tuner.repeats,
                                checkpoint=tuner.pruner is PrunerName.incumbent))
        run_id = self.recorder.begin(trial.number, values, config, is_baseline(trial))
        beating = self.heartbeat.beating(trial) if self.heartbeat else contextlib.nullcontext()
        with beating:
            try:
                outcome = self.executor.run(job, self.window.requests, lambda *p: self._progress(trial, *p),
                                            lambda probe: self._checkpoint(trial, probe, incumbent),
                                            tuner.trial_timeout_s)
            except Interrupted:
                raise self._interrupted(trial, run_id) from None
        metrics = trial_metrics(tuner.objective, outcome, self.rates)
        self._record(trial, outcome, config, metrics)
        self.recorder.end(run_id, outcome, metrics)
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
            self.recorder.interrupted(run_id)
        requeue(trial.study, next(t for t in trial.study.get_trials(deepcopy=False) if t.number == trial.number))
        return TrialInterrupted(f"trial {trial.number} {INTERRUPTED}")

    def _incumbent(self, study: optuna.Study) -> float | None:
        """The best feasible capacity so far (req/s): where a capacity trial's search starts."""
        if self.measuring.tuner.objective is not ObjectiveName.capacity:
            return None
        done = [t.values[0] for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                if feasible(t) and t.values and t.values[0] > 0]
        return max(done, default=None)

    def _values(self, outcome: TrialOutcome) -> list[float]:
        """The objective value(s); an infeasible trial (no measurement) completes at the worst value, its
        violated constraint telling the sampler why."""
        if outcome.measurement is None:
            return [0.0, math.inf] if self.measuring.tuner.objective is ObjectiveName.pareto else [0.0]
        values = list(outcome.measurement.values)
        if self.measuring.tuner.objective is ObjectiveName.capacity:
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
        estimate = incumbent if probe.passed else incumbent * attainment / self.measuring.slo.attainment
        trial.report(estimate, CHECKPOINT_STEP)
        return not trial.should_prune()

    def _record(self, trial: optuna.trial.Trial, outcome: TrialOutcome, config: EngineConfig,
                metrics: dict[str, float]) -> None:
        """Constraints (feasible when <= 0) and user attrs: the results read them back from the storage."""
        cannot_start = outcome.status is TrialStatus.infeasible and outcome.quality is None
        trial.set_constraint("memory", 1.0 if cannot_start else -1.0)  # e.g. too little memory for the config
        trial.set_constraint("quality", outcome.quality.violation(self.quality) if outcome.quality else -1.0)
        if self.measuring.tuner.objective is ObjectiveName.goodput and outcome.measurement is not None:
            trial.set_constraint("slo", self.measuring.slo.attainment - outcome.measurement.metrics["slo_attainment"])
        trial.set_user_attr("runtime", config.to_dict())
        trial.set_user_attr("status", outcome.status.value)
        trial.set_user_attr("reason", outcome.reason)
        trial.set_user_attr("metrics", {k: v for k, v in metrics.items() if v == v and abs(v) != math.inf})
        trial.set_user_attr("setup_s", outcome.setup_s)
        trial.set_user_attr("model_reused", outcome.model_reused)

