"""Rerunning the same command resumes the study; a run killed midway loses nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import optuna
import pytest
from optuna.trial import TrialState

from tests.tuner.cli import mlflow_runs, run_tuner, study_trials, tuner_args
from tuner.store.record import BASELINE_ATTR
from tuner.traffic import SAMPLE_TRAFFIC

FAST_HEARTBEAT = ["storage.heartbeat_interval_s=1", "storage.grace_period_s=2"]


def test_rerun_with_a_larger_budget_continues_the_study(tmp_path):
    first = run_tuner(tuner_args(tmp_path, SAMPLE_TRAFFIC, study="r", trials=2), cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    again = run_tuner(tuner_args(tmp_path, SAMPLE_TRAFFIC, study="r", trials=3), cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    trials = study_trials(tmp_path, "r")
    assert [t.number for t in trials] == [0, 1, 2]
    assert sum("pagetune.baseline" in t.user_attrs for t in trials) == 1
    study = optuna.load_study(study_name="r", storage=f"sqlite:///{tmp_path}/optuna.db")
    assert study.user_attrs["pagetune.sampler_seeds"] == [0, 7919]  # the resume drew from its own seed
    assert trials[2].params != trials[1].params
    _, parents, children = mlflow_runs(tmp_path, "r")
    assert len(parents) == 1 and len(children) == 3


def test_a_named_study_is_not_resumed_on_other_traffic(tmp_path):
    first = run_tuner(tuner_args(tmp_path, SAMPLE_TRAFFIC, study="named"), cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    other = tmp_path / "other.jsonl"
    other.write_text(SAMPLE_TRAFFIC.read_text().replace('"output_tokens": 4', '"output_tokens": 5'))
    args = [a for a in tuner_args(tmp_path, other, study="named") if not a.startswith("hydra.run.dir=")]
    refused = run_tuner([*args, f"hydra.run.dir={tmp_path}/out-refused"], cwd=tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == (
        "error: tuner.study_name: study 'named' was made with other settings (traffic_sha256 differ); pick another "
        "tuner.study_name (or leave it unset), or resume it anyway with tuner.resume=force")
    assert not (tmp_path / "out-refused").exists()
    assert len(study_trials(tmp_path, "named")) == 2  # nothing ran on the wrong traffic
    _, parents, _ = mlflow_runs(tmp_path, "named")
    assert [p.info.status for p in parents] == ["FINISHED"]  # the study's own parent run is untouched


def _trial_run_is_open(tmp_path, number: int) -> bool:
    try:
        _, _, children = mlflow_runs(tmp_path, "k")
    except Exception:  # the store may not be created yet
        return False
    return any(c.data.tags.get("pagetune.trial_number") == str(number) and c.info.status == "RUNNING"
               for c in children)


def _trials(tmp_path, storage: str) -> list[optuna.trial.FrozenTrial]:
    if storage == "sqlite":
        return study_trials(tmp_path, "k")
    backend = optuna.storages.journal.JournalFileBackend(str(tmp_path / "optuna_journal.log"))
    return optuna.load_study(study_name="k", storage=optuna.storages.JournalStorage(backend)).get_trials()


def _wait_for_running_trial(tmp_path, proc, storage: str, deadline_s: float = 240, number: int = 1) -> None:
    """Until the trials before `number` are complete and it runs, in Optuna and in MLflow (read from their stores)."""
    start = time.monotonic()
    while time.monotonic() - start < deadline_s:
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        if (tmp_path / "optuna.db").exists() or (tmp_path / "optuna_journal.log").exists():
            try:
                states = [t.state for t in _trials(tmp_path, storage)]
            except Exception:  # the study or its tables may not exist yet
                states = []
            expected = [TrialState.COMPLETE] * number + [TrialState.RUNNING]
            if states[:number + 1] == expected and _trial_run_is_open(tmp_path, number):
                return
        time.sleep(0.2)
    raise AssertionError(f"trial {number} never started")


@pytest.mark.parametrize("storage", ["sqlite", "journal"])
def test_killed_midway_then_rerun_completes_the_requested_total(tmp_path, storage):
    """SQLite (RDB) storage beats through Optuna; a journal file through pagetune's own heartbeat thread."""
    # Trials of a few seconds, time to catch one: a capacity well inside the window, every probe repeated.
    slow = ["replay.time_scale=1", "replay.max_requests=60", "slo.ttft_s=0.3", "slo.tpot_s=0.02", "tuner.repeats=3",
            "tuner.pruner=none", "runtime.cache.device_memory_gb=0.2"]
    journal = ["storage=journal", f"storage.url={tmp_path}/optuna_journal.log"] if storage == "journal" else []
    args = tuner_args(tmp_path, SAMPLE_TRAFFIC, *FAST_HEARTBEAT, *slow, *journal, study="k", trials=3)
    env = {**os.environ, "TQDM_DISABLE": "1"}
    proc = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    try:
        _wait_for_running_trial(tmp_path, proc, storage)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the tuner and its worker, mid-trial
        proc.wait()
    rerun = run_tuner(args, cwd=tmp_path)  # at once: it waits for trial 1's heartbeat to go stale if need be
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    trials = _trials(tmp_path, storage)
    assert trials[1].state is TrialState.FAIL  # failed by heartbeat...
    retry = [t for t in trials if t.system_attrs.get("failed_trial") == 1]
    assert len(retry) == 1 and retry[0].state is TrialState.COMPLETE  # ...and retried with its parameters
    assert retry[0].params == trials[1].params
    finished = [t for t in trials if t.state is TrialState.COMPLETE]
    assert len(finished) == 3
    _, parents, children = mlflow_runs(tmp_path, "k")
    assert len(parents) == 1
    assert all(c.info.status != "RUNNING" for c in children)
    dead = [c for c in children if c.data.tags["pagetune.trial_number"] == "1"]
    assert [c.info.status for c in dead] == ["FAILED"]
    assert ("4 trials: 3 measured, 0 stopped at the incumbent's capacity, 1 failed (0 interrupted, 1 lost with their "
            "worker), 1 retried") in (tmp_path / "out-k" / "report.md").read_text()


def _group_ends(pgid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


SLOW_TRIALS = ["replay.time_scale=1", "replay.max_requests=60", "slo.ttft_s=0.3", "slo.tpot_s=0.02", "tuner.repeats=3",
               "tuner.pruner=none", "runtime.cache.device_memory_gb=0.2"]


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_study_cleanly_and_a_rerun_measures_the_interrupted_trial(tmp_path, sig):
    """The baseline (trial 0) interrupted: failed, its MLflow run KILLED, queued again as the baseline."""
    args = tuner_args(tmp_path, SAMPLE_TRAFFIC, *SLOW_TRIALS, study="k", trials=2)
    env = {**os.environ, "TQDM_DISABLE": "1"}
    proc = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        _wait_for_running_trial(tmp_path, proc, "sqlite", number=0)
        sent = time.monotonic()
        if sig is signal.SIGINT:
            os.killpg(proc.pid, sig)  # Ctrl-C in a terminal: the whole process group, the worker too
        else:
            os.kill(proc.pid, sig)  # a service manager: the tuner alone
        stdout, stderr = proc.communicate(timeout=60)
        stopped_s = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + sig, stderr[-3000:]
    assert stopped_s < 10
    assert _group_ends(proc.pid, 5)  # the worker too (and multiprocessing's resource tracker)
    assert "Traceback" not in stderr and "BrokenPipeError" not in stdout + stderr and "KeyboardInterrupt" not in stderr
    assert stderr.strip().splitlines()[-1] == (
        f"interrupted ({sig.name}): 0 trials measured are saved in sqlite:///{tmp_path}/optuna.db; trial 0 "
        "re-enqueued; resume with the same command")
    trials = study_trials(tmp_path, "k")
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.WAITING]
    assert trials[0].user_attrs["reason"] == "interrupted"
    assert trials[1].system_attrs["failed_trial"] == 0
    assert trials[1].user_attrs[BASELINE_ATTR] == trials[0].user_attrs[BASELINE_ATTR]  # still the baseline
    _, parents, children = mlflow_runs(tmp_path, "k")
    assert [p.info.status for p in parents] == ["KILLED"]
    assert [(c.data.tags["pagetune.trial_number"], c.info.status) for c in children] == [("0", "KILLED")]
    print(f"{sig.name}: stopped {stopped_s:.1f} s after the signal")
    if sig is signal.SIGINT:
        return  # one resume is enough: it measures the re-queued trial
    rerun = run_tuner([*args, "tuner.repeats=1"], cwd=tmp_path)  # the same study (one replay a probe: faster)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    trials = study_trials(tmp_path, "k")
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.COMPLETE, TrialState.COMPLETE]
    assert sum(BASELINE_ATTR in t.user_attrs for t in trials) == 2  # the interrupted baseline and its retry only
    _, parents, children = mlflow_runs(tmp_path, "k")
    assert [p.info.status for p in parents] == ["FINISHED"]
    assert all(c.info.status != "RUNNING" for c in children)
    assert ("3 trials: 2 measured, 0 stopped at the incumbent's capacity, 1 failed (1 interrupted, 0 lost with their "
            "worker), 1 retried") in (tmp_path / "out-k" / "report.md").read_text()


@pytest.mark.slow
def test_a_second_ctrl_c_exits_at_once(tmp_path):
    args = tuner_args(tmp_path, SAMPLE_TRAFFIC, *SLOW_TRIALS, study="k", trials=2)
    proc = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TQDM_DISABLE": "1"}, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "optuna.db").exists() or TrialState.RUNNING not in _states(tmp_path):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-3000:]
            time.sleep(0.2)
        sent = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
        stopped_s = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130 and stopped_s < 3, stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == (
        "SIGINT again: exiting now; the running trial stays RUNNING until its heartbeat goes stale (a rerun then "
        "retries it)")
    assert "Traceback" not in stderr
    assert _group_ends(proc.pid, 5)  # the worker was killed on the way out


def _states(tmp_path) -> list[TrialState]:
    try:
        return [t.state for t in study_trials(tmp_path, "k")]
    except Exception:  # the study or its tables may not exist yet
        return []
