"""Run `python -m tuner` in a subprocess on the tiny CPU model, and read back what it left."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
from mlflow.tracking import MlflowClient

ROOT = Path(__file__).resolve().parents[2]
SHARED_TRACES = ROOT.parent / "shared" / "traces"


def tuner_args(tmp: Path, traffic: Path, *extra: str, study: str = "t", trials: int = 2) -> list[str]:
    """A small, fast study: few requests at 4x their rate, one replay per probe, the fewest rounds after the
    search (one to select, two to prove), stores under tmp."""
    return [
        sys.executable, "-m", "tuner", f"+traffic={traffic}", "model=tiny", f"tuner.n_trials={trials}",
        f"tuner.study_name={study}", f"storage.url=sqlite:///{tmp}/optuna.db",
        f"tracking.uri=sqlite:///{tmp}/mlflow.db", f"hydra.run.dir={tmp}/out-{study}",
        "replay.max_requests=12", "replay.time_scale=4", "tuner.n_startup_trials=1", "tuner.repeats=1",
        "tuner.finalists=1", "tuner.warmup_requests=4", "validation.select_rounds=1", "validation.proof_rounds=2",
        "runtime.cache.device_memory_gb=0.05", "runtime.scheduler.max_model_len=1024", "executor=real",
        "replay.min_window_s=0", *extra,  # a few requests: seconds of trace, no sustained rate to measure
    ]


def run_tuner(args: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TQDM_DISABLE": "1"}
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def study_trials(tmp: Path, study: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=study, storage=f"sqlite:///{tmp}/optuna.db").get_trials()


def mlflow_runs(tmp: Path, study: str):
    """(parent runs, child runs) of a study in the tmp MLflow store."""
    client = MlflowClient(f"sqlite:///{tmp}/mlflow.db")
    exp = client.get_experiment_by_name("pagetune")
    runs = client.search_runs([exp.experiment_id], f"tags.`pagetune.study` = '{study}'", max_results=500)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return client, parents, children
