"""The Optuna study: open or resume it (bound to its identity), run trials until the budget is used.

Call order (one `python -m tuner` process; several may share a study through its storage):
    open_study      create or resume the study under its name; check its fingerprint; enqueue the
                    baseline once (under the store lock)
    run_search      trials until the study holds `tuner.n_trials` (all workers together)
A failed trial never stops the study (`TrialFailed` is caught by Optuna and recorded as FAIL). An
interrupted one (`TrialInterrupted`, a signal) is FAIL too, re-queued with its parameters (`requeue`), and
the study stops: `run_search` raises `Interrupted` once Optuna has recorded it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.config import StorageConfig, TunerConfig
from tuner.interrupts import Interrupts
from tuner.search.identity import StudyIdentity
from tuner.search.samplers import build_pruner, build_sampler
from tuner.search.space import SearchSpace
from tuner.store.locking import store_lock
from tuner.store.record import BASELINE_ATTR
from tuner.store.storage import build_storage

log = logging.getLogger("pagetune")

__all__ = ["SEEDS_ATTR", "TrialFailed", "TrialInterrupted", "open_study", "requeue", "run_search",
           "trials_counted"]

class TrialFailed(Exception):
    """A trial ended without a measurement; Optuna records it as FAIL and the study goes on."""


class TrialInterrupted(TrialFailed):
    """A signal stopped the trial: FAIL in Optuna, re-queued; the study stops after recording it."""


def requeue(study: optuna.Study, trial: FrozenTrial) -> None:
    """Queue `trial`'s parameters again (what Optuna's retry callbacks do: the copy names the trial it retries,
    so the budget counts the copy and not the original). Only the baseline's mark is carried over."""
    history = [*trial.system_attrs.get("retry_history", ()), trial.number]
    system_attrs = {**trial.system_attrs, "failed_trial": history[0], "retry_history": history}
    user_attrs = {k: v for k, v in trial.user_attrs.items() if k == BASELINE_ATTR}
    study.add_trial(optuna.create_trial(state=TrialState.WAITING, params=trial.params,
                                        distributions=trial.distributions, user_attrs=user_attrs,
                                        system_attrs=system_attrs))


def open_study(tuner: TunerConfig, storage: StorageConfig, identity: StudyIdentity, space: SearchSpace,
               baseline_values: Mapping[str, Any], on_stale: Callable | None = None) -> optuna.Study:
    """Create or load the study, check what it measures, and enqueue its baseline once. Under the store
    lock: workers starting together on a fresh database would otherwise race on the tables and the baseline."""
    with store_lock(storage.url, f"open:{identity.name}"):
        study = optuna.create_study(
            study_name=identity.name, storage=build_storage(storage, on_stale),
            sampler=build_sampler(tuner), pruner=build_pruner(tuner), directions=list(tuner.directions),
            load_if_exists=True)
        identity.bind(study, tuner.resume)
        study.sampler = build_sampler(tuner, _own_seed(study, tuner.seed))
        space.enqueue_baseline(study, baseline_values)
    return study


SEEDS_ATTR = "pagetune.sampler_seeds"  # study user attr: the seed of every process that opened the study


def _own_seed(study: optuna.Study, seed: int | None) -> int | None:
    """The study seed for the first process to open it, then a seed of its own for every later worker or
    resume (same study seed, next opening): no two processes draw the same suggestions. Recorded on the study."""
    opened = study.user_attrs.get(SEEDS_ATTR, [])
    own = None if seed is None else seed + 7919 * len(opened)
    study.set_user_attr(SEEDS_ATTR, [*opened, own])
    return own


def trials_counted(study: optuna.Study) -> int:
    """Trials that use the budget: all but the queued ones and the stale ones that were re-queued."""
    trials = study.get_trials(deepcopy=False)
    retried = {n for t in trials for n in t.system_attrs.get("retry_history", ())}
    return sum(t.state is not TrialState.WAITING and t.number not in retried for t in trials)


def run_search(study: optuna.Study, objective: Callable[[optuna.trial.Trial], Any], n_trials: int,
               timeout_s: float | None, fail_stale: Callable[[optuna.Study], None], interrupts: Interrupts,
               poll_s: float = 1.0) -> None:
    """Run trials until the study holds `n_trials` (a resumed study continues to that total) and none is
    RUNNING: a trial another worker runs is waited for, a dead worker's is failed once its heartbeat is stale
    and its retry is run here. A signal stops it: `Interrupted`, after the running trial is recorded."""
    def stop_at_budget(study: optuna.Study, _trial: FrozenTrial) -> None:
        if interrupts.requested or trials_counted(study) >= n_trials:
            study.stop()

    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    fail_stale(study)  # a killed run's trial is failed and re-queued before the budget is counted
    if trials_counted(study) >= n_trials and not _running(study):
        log.info("study %s already holds %d trials: nothing to run", study.study_name, trials_counted(study))
        return
    said = False
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        if trials_counted(study) < n_trials and (left is None or left > 0):
            study.optimize(objective, callbacks=[stop_at_budget], catch=(TrialFailed,), timeout=left,
                           gc_after_trial=False)
        interrupts.check()
        running = _running(study)
        if not running:
            return
        if not said:  # no result while a trial may still change it, or lies in a dead worker's hands
            log.info("waiting for trial(s) %s: finished by their worker, or failed and retried here once their "
                     "heartbeat is stale", ", ".join(map(str, running)))
            said = True
        time.sleep(poll_s)
        fail_stale(study)


def _running(study: optuna.Study) -> list[int]:
    return [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
