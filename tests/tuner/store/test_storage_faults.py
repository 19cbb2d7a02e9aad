"""A real PostgreSQL restarted and stopped under two `python -m tuner` workers sharing one study.

An outage shorter than `storage.retry_s` (a restart, a stop of a few seconds) costs no worker and no trial;
a longer one ends each worker with one line naming the storage and the root cause.
"""

from __future__ import annotations

import os
import subprocess
import time

import optuna
import pytest
from mlflow import MlflowClient
from optuna.trial import TrialState

from tests.tuner.cli import tuner_args
from tests.tuner.pg import private_pg  # noqa: F401 (fixture)
from tuner.traffic import SAMPLE_TRAFFIC

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
WORKERS, TRIALS = 2, 8


def _start_workers(tmp_path, url: str, *extra: str) -> list[subprocess.Popen]:
    """Two workers on the study at `url` (MLflow in SQLite unless `extra` says otherwise)."""
    env = {**os.environ, "TQDM_DISABLE": "1", "PYTHONUNBUFFERED": "1"}
    procs = []
    for w in range(WORKERS):
        args = tuner_args(tmp_path, SAMPLE_TRAFFIC, f"storage.url={url}", "replay.max_requests=8", *extra,
                          study="pg", trials=TRIALS)
        args = [a if not a.startswith("hydra.run.dir=") else f"hydra.run.dir={tmp_path}/out-{w}" for a in args]
        procs.append(subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    return procs


def _wait_for_complete_trial(url: str, procs, deadline_s: float = 120) -> None:
    start = time.monotonic()
    while time.monotonic() - start < deadline_s:
        assert all(p.poll() is None for p in procs), [p.stderr.read()[-3000:] for p in procs]
        try:
            states = [t.state for t in optuna.load_study(study_name="pg", storage=url).get_trials()]
        except Exception:  # the study or its tables may not exist yet
            states = []
        if TrialState.COMPLETE in states:
            return
        time.sleep(0.3)
    raise AssertionError("no trial completed")


def _finish(procs) -> list[subprocess.CompletedProcess]:
    outs = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        outs.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return outs


def test_a_restart_and_a_short_outage_cost_no_worker_and_no_trial(tmp_path, private_pg):  # noqa: F811
    pg = private_pg
    # both stores in it; a running trial beats every second, so the outage always meets a storage call (else a
    # worker between two calls could sail through it without a word, and the messages below would be missing)
    procs = _start_workers(tmp_path, pg.url, "storage.retry_s=30", "storage.heartbeat_interval_s=1",
                           f"tracking.uri={pg.mlflow_url}")
    _wait_for_complete_trial(pg.url, procs)
    pg.restart()  # `pg_ctl restart -m fast`: every open connection is cut
    away_s = pg.stop_for(6.0)  # well inside storage.retry_s
    outs = _finish(procs)
    for out in outs:
        assert out.returncode == 0, out.stderr[-3000:]
        assert "Traceback" not in out.stderr, out.stderr[-3000:]
    trials = optuna.load_study(study_name="pg", storage=pg.url).get_trials()
    states = [t.state for t in trials]
    assert TrialState.RUNNING not in states and TrialState.FAIL not in states  # no trial lost to the outage
    done = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert TRIALS <= len(done) <= TRIALS + WORKERS - 1  # the shared budget: the last trials may start together
    drawn = [tuple(sorted(t.params.items())) for t in trials if "pagetune.baseline" not in t.user_attrs]
    assert len(set(drawn)) == len(drawn)
    logs = "".join(out.stdout + out.stderr for out in outs)
    assert f"waiting for storage {pg.url}: " in logs
    assert "(retrying for up to 30 s, storage.retry_s)" in logs
    assert f"storage {pg.url} is back after" in logs
    client = MlflowClient(pg.mlflow_url)
    runs = client.search_runs([client.get_experiment_by_name("pagetune").experiment_id], "", max_results=100)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = sorted(int(r.data.tags["pagetune.trial_number"]) for r in runs if "mlflow.parentRunId" in r.data.tags)
    assert [p.info.status for p in parents] == ["FINISHED"] and all(r.info.status != "RUNNING" for r in runs)
    assert children == sorted(t.number for t in trials)  # one child per trial, none lost to the outage
    print(f"survived: a restart, then {away_s:.1f} s stopped; {len(done)} trials")


def test_an_outage_longer_than_retry_s_ends_each_worker_with_one_line(tmp_path, private_pg):  # noqa: F811
    pg = private_pg
    procs = _start_workers(tmp_path, pg.url, "storage.retry_s=4")
    _wait_for_complete_trial(pg.url, procs)
    pg.stop()
    outs = _finish(procs)  # they give up 4 s into the outage
    for out in outs:
        assert out.returncode == 1, out.stderr[-3000:]
        assert "Traceback" not in out.stderr, out.stderr[-3000:]
        last = out.stderr.strip().splitlines()[-1]
        assert last.startswith(f"error: storage {pg.url} unreachable for more than 4 s (storage.retry_s): "
                               "OperationalError: "), last
    pg.start()
    trials = optuna.load_study(study_name="pg", storage=pg.url).get_trials()
    assert any(t.state is TrialState.COMPLETE for t in trials)  # what was measured before is kept
