"""After the search: pick the winner and the baseline, and replay both again on both windows.

The held-out window is traffic the search never saw; replaying there (several times, for the
spread) shows a lucky or overfitted winner for what it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import optuna
from optuna.trial import FrozenTrial, TrialState
from tqdm.auto import tqdm

from tuner.config import AppConfig
from tuner.space import is_baseline
from tuner.supervisor import WorkerSupervisor
from tuner.traffic import TrafficRequest
from tuner.trial import TrialJob, TrialStatus

BEST, BASELINE = "best", "baseline"


class Picked(NamedTuple):
    best: FrozenTrial
    baseline: FrozenTrial | None


def _feasible(t: FrozenTrial) -> bool:
    ok = t.state is TrialState.COMPLETE and t.user_attrs.get("status") == TrialStatus.ok.value
    return ok and all(c <= 0 for c in t.constraints.values())


def pick(study: optuna.Study, app: AppConfig) -> Picked:
    """The best feasible trial (pareto: the highest-throughput trial of the front that meets the SLO)."""
    trials = study.get_trials(deepcopy=False)
    baseline = next((t for t in trials if is_baseline(t) and t.state is TrialState.COMPLETE), None)
    feasible = [t for t in trials if _feasible(t)]
    if not feasible:
        raise RuntimeError(f"study {study.study_name}: no feasible completed trial; see the failure reasons "
                           "in the trial list above and in MLflow")
    if app.tuner.objective.value == "pareto":
        front = {t.number for t in study.best_trials}
        pool = [t for t in feasible if t.number in front] or feasible
        met = [t for t in pool if t.user_attrs.get("metrics", {}).get("slo_met") == 1.0] or pool
        return Picked(max(met, key=lambda t: t.values[0]), baseline)
    return Picked(max(feasible, key=lambda t: t.values[0]), baseline)


class Validation(NamedTuple):
    windows: dict[str, dict[str, list[dict[str, float]]]]  # window -> config label -> metrics per repeat
    latencies: dict[str, dict[str, list[float]]]  # config label -> {"ttft": [...], "tpot": [...]} (held out)
    failed: list[str]  # replays that did not complete, with their reasons


def replay_config(supervisor: WorkerSupervisor, app: AppConfig, runtime: dict[str, Any], label: str,
                  requests: Sequence[TrafficRequest], key: str, repeats: int, failed: list[str]):
    """`repeats` isolated replays of one config: (metrics per completed replay, latency rows of the first)."""
    results, rows = [], []
    for i in tqdm(range(repeats), desc=f"validate {label} on {key}", unit="replay", leave=False):
        job = TrialJob(-1 - i, runtime, None, key, "goodput", app.slo, app.quality)
        outcome = supervisor.run(job, requests, lambda d, g: True, app.tuner.trial_timeout_s)
        if outcome.status is TrialStatus.ok:
            results.append(outcome.metrics)
            rows = rows or list(outcome.latency_rows)
        else:
            failed.append(f"{label} on the {key} window, replay {i + 1}: {outcome.status.value}: {outcome.reason}")
    return results, rows


def validate(supervisor: WorkerSupervisor, app: AppConfig, picked: Picked, search: Sequence[TrafficRequest],
             held_out: Sequence[TrafficRequest]) -> Validation:
    """Search window: the search trial itself plus repeats-1 replays; held-out window: `repeats` replays."""
    repeats = app.validation.repeats
    configs = {BEST: picked.best}
    if picked.baseline is not None:
        configs[BASELINE] = picked.baseline
    windows: dict[str, dict[str, list[dict[str, float]]]] = {"search": {}, "validation": {}}
    latencies: dict[str, dict[str, list[float]]] = {}
    failed: list[str] = []
    for label, trial in configs.items():
        runtime = trial.user_attrs["runtime"]
        more, rows = replay_config(supervisor, app, runtime, label, search, "search", repeats - 1, failed)
        windows["search"][label] = [trial.user_attrs["metrics"], *more]
        if held_out:
            windows["validation"][label], rows = replay_config(supervisor, app, runtime, label, held_out,
                                                               "validation", repeats, failed)
        latencies[label] = {k: [r[f"{k}_s"] for r in rows if r[f"{k}_s"] is not None] for k in ("ttft", "tpot")}
    kept = {w: c for w, c in windows.items() if len(c) == len(configs) and all(c.values())}
    return Validation(kept, latencies, failed)
