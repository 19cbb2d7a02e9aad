"""`run_search` never returns while a trial is RUNNING: a dead worker's trial is waited for until its heartbeat
is stale, then failed, re-queued and measured here. Real Optuna heartbeats on SQLite."""

from __future__ import annotations

import logging
import time

import optuna
import pytest
from optuna.trial import TrialState

from tuner.config import StorageConfig
from tuner.interrupts import Interrupted, Interrupts
from tuner.search.study import run_search
from tuner.store.storage import build_storage

pytestmark = [pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning"),
              pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used:UserWarning")]


def _study(tmp_path) -> optuna.Study:
    retry = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=2)
    storage = build_storage(StorageConfig(url=f"sqlite:///{tmp_path}/o.db", heartbeat_interval_s=1,
                                          grace_period_s=2), retry)
    return optuna.create_study(study_name="s", storage=storage, sampler=optuna.samplers.RandomSampler(seed=0))


def _dead_workers_trial(study: optuna.Study) -> float:
    """A trial left RUNNING by a worker that beat once and died."""
    trial = study.ask()
    x = trial.suggest_float("x", 0, 1)
    study._storage.record_heartbeat(trial._trial_id)
    return x


def test_a_dead_workers_trial_is_waited_for_then_failed_retried_and_measured(tmp_path, caplog):
    study = _study(tmp_path)
    x = _dead_workers_trial(study)
    began = time.monotonic()
    with caplog.at_level(logging.INFO, logger="pagetune"):
        run_search(study, lambda t: t.suggest_float("x", 0, 1), 1, None, optuna.storages.fail_stale_trials,
                   Interrupts(), poll_s=0.2)
    waited_s = time.monotonic() - began
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.COMPLETE]
    assert trials[1].params == {"x": x} and trials[1].value == x and trials[1].system_attrs["failed_trial"] == 0
    assert [r.getMessage() for r in caplog.records if r.name == "pagetune"] == [
        "waiting for trial(s) 0: finished by their worker, or failed and retried here once their heartbeat is stale"]
    assert 2 <= waited_s < 10  # past the grace period, not much more


def test_a_signal_while_waiting_stops_it(tmp_path):
    study = _study(tmp_path)
    _dead_workers_trial(study)
    interrupts = Interrupts()
    interrupts.signum = 15
    with pytest.raises(Interrupted) as stopped:
        run_search(study, lambda t: 0.0, 1, None, lambda s: None, interrupts, poll_s=0.2)
    assert stopped.value.exit_code == 143
    assert [t.state for t in study.get_trials()] == [TrialState.RUNNING]  # left to its heartbeat
