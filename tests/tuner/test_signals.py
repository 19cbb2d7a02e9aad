"""A first SIGTERM stops a study within seconds in any phase, keeps what was measured, and the same command
resumes it: `python -m tuner` in a subprocess on the shipped H200 profile, the signal sent while a trial runs
(the search) and while the finalists are re-measured (the conclusion); and the conclusion on the real runtime
(the tiny model on this CPU). Every wait is bounded."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.tuner.cli import ROOT, run_tuner, study_trials, tuner_args
from tuner.results.kept import PREFIX
from tuner.traffic import SAMPLE_TRAFFIC

PROFILE = ROOT / "conf" / "profiles" / "h200-llama-3-8b.json"
RAG = ROOT / "tuner" / "data" / "rag.jsonl"
# the README's quick start (its traffic, the default SLO and rounds) on the shipped profile: trials of about 4 s and a
# conclusion of about 20 measurements of about a second each on a 2-core CPU, long enough to be caught mid-way also on
# a loaded machine (on the sample, this profile took 0.15 s a trial and 0.2 s for the whole conclusion)
QUICK = ["executor=sim", f"executor.profile={PROFILE}", "tuner.n_startup_trials=1"]


def _args(tmp_path: Path, trials: int = 3) -> list[str]:
    """The quick start with `trials` trials, its stores and outputs under tmp_path."""
    return [sys.executable, "-m", "tuner", f"+traffic={RAG}", f"tuner.n_trials={trials}", "tuner.study_name=s",
            f"storage.url=sqlite:///{tmp_path}/optuna.db", f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
            f"hydra.run.dir={tmp_path}/out-s", *QUICK]


def _study(tmp_path: Path) -> optuna.Study | None:
    try:
        return optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path}/optuna.db")
    except Exception:  # not created yet, or its tables mid-creation
        return None


def _signal_when(tmp_path: Path, proc: subprocess.Popen, ready, within_s: float = 240) -> float:
    """Poll the study until `ready(tmp_path)`, then SIGTERM the tuner (as a service manager does); the time sent."""
    deadline = time.monotonic() + within_s
    while True:
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        assert time.monotonic() < deadline, "the phase to interrupt never came"
        if ready(tmp_path):
            os.kill(proc.pid, signal.SIGTERM)
            return time.monotonic()
        time.sleep(0.005)


def _interrupt(tmp_path: Path, ready, args: list[str] | None = None) -> tuple[str, str, float]:
    env = {**os.environ, "TQDM_DISABLE": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(args or _args(tmp_path), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True)
    try:
        sent = _signal_when(tmp_path, proc, ready)
        stdout, stderr = proc.communicate(timeout=30)
        stopped_s = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 143, stderr[-3000:]
    assert "Traceback" not in stderr
    return stdout, stderr, stopped_s


def _read(tmp_path: Path, sql: str, *params) -> tuple | None:
    """The first row of a query on the study's store, read directly (well under a millisecond, where loading the
    study takes tens of milliseconds): a short phase is seen and signalled while it runs, also on a loaded machine.
    None before the tables exist or while a write holds the lock."""
    db = tmp_path / "optuna.db"
    if not db.is_file():
        return None
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.1) as conn:
            return conn.execute(sql, params).fetchone()
    except sqlite3.OperationalError:
        return None


def _running(tmp_path: Path) -> bool:
    """A searched trial (not the baseline) is running (a pruned one is shorter than a whole one)."""
    return _read(tmp_path, "SELECT 1 FROM trials WHERE state = 'RUNNING' AND number > 0") is not None


def _concluding(tmp_path: Path) -> bool:
    """Two measurements of the conclusion kept."""
    kept = _read(tmp_path, "SELECT count(*) FROM study_user_attributes WHERE key LIKE ?", f"{PREFIX}%")
    return kept is not None and kept[0] >= 2


@pytest.mark.slow
def test_sigterm_in_the_search_stops_within_seconds_and_a_rerun_resumes(tmp_path):
    args = _args(tmp_path, trials=4)  # three searched trials to catch running
    _, stderr, stopped_s = _interrupt(tmp_path, _running, args)
    assert stopped_s < 5, f"stopped {stopped_s:.1f} s after SIGTERM"
    assert "SIGTERM: stopping now; what was measured is kept" in stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("interrupted (SIGTERM): ") and "re-enqueued; resume with the same command" in last
    trials = study_trials(tmp_path, "s")
    assert [t.state for t in trials].count(TrialState.WAITING) == 1  # the interrupted trial, queued again
    rerun = run_tuner(args, cwd=tmp_path, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    done = [t for t in study_trials(tmp_path, "s") if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(done) == 4 and (tmp_path / "out-s" / "best.yaml").is_file()


@pytest.mark.slow
def test_sigterm_in_the_conclusion_stops_within_seconds_keeps_it_and_a_rerun_resumes_it(tmp_path):
    _, stderr, stopped_s = _interrupt(tmp_path, _concluding, _args(tmp_path))
    assert stopped_s < 5, f"stopped {stopped_s:.1f} s after SIGTERM"
    kept = sum(k.startswith(PREFIX) for k in _study(tmp_path).user_attrs)
    assert kept >= 2 and not (tmp_path / "out-s" / "best.yaml").exists()
    assert stderr.strip().splitlines()[-1].endswith(
        f"; {kept} measurements of the conclusion kept; no trial was running; resume with the same command")
    rerun = run_tuner(_args(tmp_path), cwd=tmp_path, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"conclusion: resumed, {kept} measurements kept from an earlier run are not made again" in rerun.stdout
    assert (tmp_path / "out-s" / "best.yaml").is_file() and "Verdict: " in rerun.stdout


@pytest.mark.slow
def test_sigterm_in_a_real_conclusion_stops_the_worker_within_seconds_and_a_rerun_resumes_it(tmp_path):
    """The same on the real runtime (the tiny model in the worker): the supervisor's poll, not the simulator's."""
    args = [*tuner_args(tmp_path, SAMPLE_TRAFFIC, study="s", trials=2), "tuner.finalists=1",
            "validation.select_rounds=3", "validation.proof_rounds=8"]
    _, stderr, stopped_s = _interrupt(tmp_path, _concluding, args)
    assert stopped_s < 5, f"stopped {stopped_s:.1f} s after SIGTERM"
    kept = sum(k.startswith(PREFIX) for k in _study(tmp_path).user_attrs)
    assert stderr.strip().splitlines()[-1].endswith(
        f"; {kept} measurements of the conclusion kept; no trial was running; resume with the same command")
    rerun = run_tuner(args, cwd=tmp_path, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"conclusion: resumed, {kept} measurements kept from an earlier run are not made again" in rerun.stdout
