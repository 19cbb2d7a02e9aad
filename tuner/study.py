"""The Optuna study: storage, baseline, the objective that runs each trial in the worker, the budget.

Call order (one `python -m tuner` process; several may share a study through its storage):
    open_study      create or resume the study; enqueue the baseline once (under a study lock)
    run_search      trials until the study holds `tuner.n_trials` (all workers together)
Each trial: suggest knob values -> runtime config -> worker replays the traffic -> metrics ->
constraints and user attrs on the Optuna trial -> a child run in MLflow -> values, or a failure
with its reason. A failed trial never stops the study.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
import yaml
from optuna.trial import FrozenTrial, TrialState

from tuner.config import AppConfig
from tuner.journal_heartbeat import JournalHeartbeat
from tuner.locking import store_lock
from tuner.optuna_setup import build_pruner, build_sampler, build_storage
from tuner.space import SearchSpace, is_baseline
from tuner.supervisor import WorkerSupervisor
from tuner.tracking import RunState
from tuner.traffic import TrafficRequest
from tuner.trial import TrialJob, TrialOutcome, TrialStatus

log = logging.getLogger("pagetune")

FAILED = (TrialStatus.error, TrialStatus.oom, TrialStatus.timeout, TrialStatus.died)


class TrialFailed(Exception):
    """A trial ended without a measurement; Optuna records it as FAIL and the study goes on."""


def open_study(app: AppConfig, space: SearchSpace, on_stale: Callable | None = None) -> optuna.Study:
    """Create or load the study and enqueue its baseline once. Under the store lock: workers starting
    together on a fresh database would otherwise race on creating Optuna's tables and the baseline."""
    with store_lock(app.storage.url, f"open:{app.tuner.study_name}"):
        study = optuna.create_study(
            study_name=app.tuner.study_name, storage=build_storage(app.storage, on_stale),
            sampler=build_sampler(app.tuner), pruner=build_pruner(app.tuner), directions=list(app.tuner.directions),
            load_if_exists=True)
        space.enqueue_baseline(study, app.runtime.to_dict())
    return study


def objective_values(app: AppConfig, metrics: dict[str, float]) -> list[float]:
    objective = app.tuner.objective.value
    if objective == "pareto":
        return [metrics.get("output_tok_s", 0.0), metrics.get("e2e_p99_s", float("inf"))]
    return [metrics.get("capacity_scale" if objective == "capacity" else "goodput_rps", 0.0)]


@dataclass
class TrialRunner:
    """The Optuna objective: one trial in the worker, recorded in Optuna and MLflow."""

    app: AppConfig
    space: SearchSpace
    supervisor: WorkerSupervisor
    requests: Sequence[TrafficRequest]
    traffic_key: str
    tracker: Any  # Tracker | FallbackTracker
    parent_run_id: str
    on_trial_end: Callable[[optuna.trial.Trial, TrialOutcome], None] | None = None
    on_progress: Callable[[int, int, int], None] | None = None  # (trial number, requests done, requests)
    heartbeat: JournalHeartbeat | None = None  # journal storage only: RDB storage beats by itself

    def fail_stale(self, study: optuna.Study, running: int | None = None) -> None:
        """Fail (and re-queue) trials whose worker died; RDB storage does it through its heartbeats."""
        if self.heartbeat is not None:
            self.heartbeat.fail_stale(study, running)
        else:
            optuna.storages.fail_stale_trials(study)

    def __call__(self, trial: optuna.trial.Trial) -> list[float]:
        if self.heartbeat is not None:
            self.heartbeat.fail_stale(trial.study, running=trial.number)
        values = self.space.suggest(trial)
        runtime = self.space.apply(self.app.runtime.to_dict(), values)
        base = self.app.runtime.to_dict()
        reference = base if self.space.changes_numerics(values) else None
        config_yaml = yaml.safe_dump({"runtime": runtime, "knobs": values}, sort_keys=False)
        run_id = self.tracker.begin_trial(self.parent_run_id, trial.number, values, config_yaml,
                                          {"pagetune.baseline": str(is_baseline(trial)).lower()})
        job = TrialJob(trial.number, runtime, reference, self.traffic_key, self.app.tuner.objective.value,
                       self.app.slo, self.app.quality, report_every=self._report_every(),
                       capacity_steps=self.app.tuner.capacity_steps)
        beating = self.heartbeat.beating(trial) if self.heartbeat else contextlib.nullcontext()
        with beating:
            outcome = self.supervisor.run(job, self.requests, lambda d, g: self._progress(trial, d, g),
                                          self.app.tuner.trial_timeout_s)
        self._record(trial, outcome, runtime)
        state = RunState.FAILED if outcome.status in FAILED else RunState.FINISHED
        if outcome.status is TrialStatus.pruned:
            state = RunState.KILLED
        self.tracker.end_trial(run_id, outcome.metrics, state, outcome.reason, list(outcome.latency_rows))
        if self.on_trial_end:
            self.on_trial_end(trial, outcome)
        if outcome.status in FAILED:
            raise TrialFailed(f"trial {trial.number} {outcome.status.value}: {outcome.reason}")
        if outcome.status is TrialStatus.pruned:
            raise optuna.TrialPruned(outcome.reason)
        return objective_values(self.app, outcome.metrics)

    def _report_every(self) -> int:
        """Finished requests between progress reports: about 20 per replay (a progress bar, and the pruner)."""
        return max(1, len(self.requests) // 20)

    def _progress(self, trial: optuna.trial.Trial, done: int, goodput: float) -> bool:
        if self.on_progress is not None:
            self.on_progress(trial.number, done, len(self.requests))
        if self.app.tuner.objective.value != "goodput" or self.app.tuner.pruner.value == "none":
            return True  # Optuna prunes single-objective studies only
        trial.report(goodput, step=done)
        return not trial.should_prune()

    def _record(self, trial: optuna.trial.Trial, outcome: TrialOutcome, runtime: dict[str, Any]) -> None:
        """Constraints (feasible when <= 0) and user attrs: the report reads them back from the storage."""
        cannot_start = outcome.status is TrialStatus.infeasible and outcome.quality is None
        trial.set_constraint("memory", 1.0 if cannot_start else -1.0)  # e.g. too little memory for the config
        trial.set_constraint("quality", outcome.quality.violation(self.app.quality) if outcome.quality else -1.0)
        trial.set_user_attr("runtime", runtime)
        trial.set_user_attr("status", outcome.status.value)
        trial.set_user_attr("reason", outcome.reason)
        trial.set_user_attr("metrics", {k: v for k, v in outcome.metrics.items() if v == v})  # NaN dropped
        trial.set_user_attr("setup_s", outcome.setup_s)
        trial.set_user_attr("model_reused", outcome.model_reused)


def trials_counted(study: optuna.Study) -> int:
    """Trials that use the budget: all but the queued ones and the stale ones that were re-queued."""
    trials = study.get_trials(deepcopy=False)
    retried = {n for t in trials for n in t.system_attrs.get("retry_history", ())}
    return sum(t.state is not TrialState.WAITING and t.number not in retried for t in trials)


def run_search(study: optuna.Study, runner: TrialRunner, n_trials: int, timeout_s: float | None) -> None:
    """Run trials until the study holds `n_trials` (a resumed study continues to that total)."""
    def stop_at_budget(study: optuna.Study, _trial: FrozenTrial) -> None:
        if trials_counted(study) >= n_trials:
            study.stop()

    runner.fail_stale(study)  # a killed run's trial is failed and re-queued before the budget is counted
    if trials_counted(study) >= n_trials:
        log.info("study %s already holds %d trials: nothing to run", study.study_name, trials_counted(study))
        return
    study.optimize(runner, callbacks=[stop_at_budget], catch=(TrialFailed,), timeout=timeout_s,
                   gc_after_trial=False)
