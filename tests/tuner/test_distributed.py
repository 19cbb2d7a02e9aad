"""Several `python -m tuner` workers on one study: PostgreSQL (workers on many machines) and a journal file."""

from __future__ import annotations

import os
import subprocess
from collections import Counter

import optuna
import pytest
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from tests.tuner.cli import tuner_args
from tuner.traffic import SAMPLE_TRAFFIC

PG_URL = os.environ.get("PAGETUNE_PG_URL")
PG_MLFLOW_URL = os.environ.get("PAGETUNE_PG_MLFLOW_URL")
WORKERS, TRIALS = 3, 6


def _run_workers(tmp_path, study: str, storage: list[str], tracking_uri: str) -> list[subprocess.CompletedProcess]:
    env = {**os.environ, "TQDM_DISABLE": "1"}
    procs = []
    for w in range(WORKERS):
        args = tuner_args(tmp_path, SAMPLE_TRAFFIC, *storage, f"tracking.uri={tracking_uri}",
                          "replay.max_requests=8", study=study, trials=TRIALS)
        args = [a if not a.startswith("hydra.run.dir=") else f"hydra.run.dir={tmp_path}/out-{w}" for a in args]
        procs.append(subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    outs = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=900)
        outs.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return outs


def _check(outs, study: optuna.Study, tracking_uri: str, name: str) -> None:
    for out in outs:
        assert out.returncode == 0, out.stderr[-3000:]
    trials = study.get_trials()
    complete = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)]
    # The budget is shared: at most one trial per extra worker can start in the same instant as the last.
    assert TRIALS <= len(complete) <= TRIALS + WORKERS - 1
    baselines = [t for t in trials if "pagetune.baseline" in t.user_attrs]
    assert len(baselines) == 1  # enqueued once, under the study lock, whatever the number of workers
    # Every worker samples from its own seed (the study seed, then one per later opening): no repeats.
    assert sorted(study.user_attrs["pagetune.sampler_seeds"]) == [0, 7919, 15838]
    drawn = [tuple(sorted(t.params.items())) for t in trials if t not in baselines and t.params]
    assert len(set(drawn)) == len(drawn), drawn
    client = MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name("pagetune")
    runs = client.search_runs([exp.experiment_id], f"tags.`pagetune.study` = '{name}'", max_results=500)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = Counter(r.data.tags["pagetune.trial_number"] for r in runs if "mlflow.parentRunId" in r.data.tags)
    assert len(parents) == 1
    assert children == Counter(str(t.number) for t in trials if t.state is not TrialState.WAITING)


@pytest.mark.postgres
@pytest.mark.skipif(PG_URL is None, reason="PAGETUNE_PG_URL is not set (.ci/run starts a PostgreSQL server)")
def test_three_workers_share_one_study_on_postgresql(tmp_path):
    name = f"pg-{tmp_path.name}"
    outs = _run_workers(tmp_path, name, [f"storage.url={PG_URL}"], PG_MLFLOW_URL)
    _check(outs, optuna.load_study(study_name=name, storage=PG_URL), PG_MLFLOW_URL, name)


def test_three_workers_share_one_study_on_a_journal_file(tmp_path):
    journal = tmp_path / "optuna_journal.log"
    outs = _run_workers(tmp_path, "journal", ["storage=journal", f"storage.url={journal}"],
                        f"sqlite:///{tmp_path}/mlflow.db")
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(journal)))
    _check(outs, optuna.load_study(study_name="journal", storage=storage), f"sqlite:///{tmp_path}/mlflow.db",
           "journal")
