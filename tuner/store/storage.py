"""Where a study lives: RDB storage (SQLite, PostgreSQL) with heartbeats, or a journal file."""

from __future__ import annotations

import time
from collections.abc import Callable

import optuna
import sqlalchemy

from tuner.config import StorageBackend, StorageConfig
from tuner.store.retry import Outages, RetryingStorage

__all__ = ["build_storage"]


def build_storage(cfg: StorageConfig, on_stale: Callable[..., None] | None = None) -> optuna.storages.BaseStorage:
    """RDB storage (SQLite, PostgreSQL) with heartbeats, or a journal file for several local workers.

    `on_stale(study, trial)` runs when a worker finds a trial whose worker stopped beating. Optuna's
    heartbeats are RDB-only; journal studies get theirs from `tuner.journal_heartbeat`. An RDB storage
    checks each pooled connection before use and retries every call through an outage of up to
    `storage.retry_s` (`tuner.store.retry`), its opening too.
    """
    if cfg.backend is StorageBackend.journal:
        backend = optuna.storages.journal.JournalFileBackend(cfg.url)
        return optuna.storages.JournalStorage(backend)
    outages = Outages(cfg.url, cfg.retry_s)
    rdb = outages.call(lambda: _rdb_storage(cfg, on_stale))
    return RetryingStorage(optuna.storages._CachedStorage(rdb), outages)


def _engine_kwargs(url: str) -> dict:
    """A dead pooled connection (a restarted server) is replaced before use; a connect gives up in 10 s."""
    kwargs: dict = {"pool_pre_ping": True}
    if url.startswith("postgresql"):
        kwargs["connect_args"] = {"connect_timeout": 10}
    return kwargs


# Optuna creates its tables and stamps their alembic version without a lock. pagetune's own workers
# open the study under `store_lock`, but anything else opening a fresh store at the same moment (a
# dashboard, a script reading the trials) makes one side fail: "table studies already exists" or
# "UNIQUE constraint failed: alembic_version.version_num" (optuna/optuna#4621). Opening again after
# the other side finished finds the tables and the stamp in place.
_CREATE_ATTEMPTS = 8  # about 7 s of waiting in all


def _rdb_storage(cfg: StorageConfig, on_stale: Callable[..., None] | None) -> optuna.storages.RDBStorage:
    def open_store() -> optuna.storages.RDBStorage:
        return optuna.storages.RDBStorage(cfg.url, engine_kwargs=_engine_kwargs(cfg.url),
                                          heartbeat_interval=cfg.heartbeat_interval_s,
                                          grace_period=cfg.grace_period_s, heartbeat_stale_trial_callback=on_stale)

    for attempt in range(1, _CREATE_ATTEMPTS):
        try:
            return open_store()
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.OperationalError) as err:
            if not _lost_creation_race(err):  # an outage: Outages.call retries it
                raise
            time.sleep(0.25 * attempt)
    return open_store()


def _lost_creation_race(err: sqlalchemy.exc.DBAPIError) -> bool:
    text = str(err.orig).lower()
    return "already exists" in text or "alembic_version" in text or "duplicate key" in text
