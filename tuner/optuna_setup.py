"""Optuna sampler, pruner and storage from the tuner config: fixed tables from enum names.

Constraints are not passed as `constraints_func` (deprecated in Optuna 5): the objective calls
`trial.set_constraint(name, value)` and TPE, GP and NSGA-II read those values themselves.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import optuna
import sqlalchemy

from tuner.config import PrunerName, SamplerName, StorageBackend, StorageConfig, TunerConfig

_SAMPLERS = {
    SamplerName.tpe: lambda t: optuna.samplers.TPESampler(seed=t.seed, n_startup_trials=t.n_startup_trials),
    SamplerName.gp: lambda t: optuna.samplers.GPSampler(seed=t.seed, n_startup_trials=t.n_startup_trials),
    SamplerName.nsga2: lambda t: optuna.samplers.NSGAIISampler(seed=t.seed,
                                                               population_size=t.population_size),
    SamplerName.random: lambda t: optuna.samplers.RandomSampler(seed=t.seed),
    # scramble: without it a Sobol sequence ignores the seed.
    SamplerName.qmc: lambda t: optuna.samplers.QMCSampler(seed=t.seed, scramble=True),
}

_PRUNERS = {
    PrunerName.median: lambda t: optuna.pruners.MedianPruner(
        n_startup_trials=t.pruner_startup_trials, n_warmup_steps=t.pruner_warmup_steps),
    PrunerName.hyperband: lambda t: optuna.pruners.HyperbandPruner(),
    PrunerName.none: lambda t: optuna.pruners.NopPruner(),
}


def build_sampler(cfg: TunerConfig) -> optuna.samplers.BaseSampler:
    """The Optuna sampler named by `tuner.sampler`."""
    return _SAMPLERS[cfg.sampler](cfg)


def build_pruner(cfg: TunerConfig) -> optuna.pruners.BasePruner:
    """The Optuna pruner named by `tuner.pruner`."""
    return _PRUNERS[cfg.pruner](cfg)


def build_storage(cfg: StorageConfig, on_stale: Callable[..., None] | None = None) -> optuna.storages.BaseStorage:
    """RDB storage (SQLite, PostgreSQL) with heartbeats, or a journal file for several local workers.

    `on_stale(study, trial)` runs when a worker finds a trial whose worker stopped beating. Optuna's
    heartbeats are RDB-only; journal studies get theirs from `tuner.journal_heartbeat`.
    """
    if cfg.backend is StorageBackend.journal:
        backend = optuna.storages.journal.JournalFileBackend(cfg.url)
        return optuna.storages.JournalStorage(backend)
    return _rdb_storage(cfg, on_stale)


# Optuna creates its tables and stamps their alembic version without a lock. pagetune's own workers
# open the study under `store_lock`, but anything else opening a fresh store at the same moment (a
# dashboard, a script reading the trials) makes one side fail: "table studies already exists" or
# "UNIQUE constraint failed: alembic_version.version_num" (optuna/optuna#4621). Opening again after
# the other side finished finds the tables and the stamp in place.
_CREATE_ATTEMPTS = 8  # about 7 s of waiting in all


def _rdb_storage(cfg: StorageConfig, on_stale: Callable[..., None] | None) -> optuna.storages.RDBStorage:
    def open_store() -> optuna.storages.RDBStorage:
        return optuna.storages.RDBStorage(cfg.url, heartbeat_interval=cfg.heartbeat_interval_s,
                                          grace_period=cfg.grace_period_s, heartbeat_stale_trial_callback=on_stale)

    for attempt in range(1, _CREATE_ATTEMPTS):
        try:
            return open_store()
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.OperationalError) as err:
            if not _lost_creation_race(err):
                raise
            time.sleep(0.25 * attempt)
    return open_store()


def _lost_creation_race(err: sqlalchemy.exc.DBAPIError) -> bool:
    text = str(err.orig).lower()
    return "already exists" in text or "alembic_version" in text or "duplicate key" in text
