"""A lock shared by every worker of one study, so the baseline is enqueued exactly once.

PostgreSQL storage: a session-level advisory lock (workers may be on several machines).
SQLite or journal file: an flock on a file beside the database (workers on one machine).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
from collections.abc import Iterator
from pathlib import Path

import sqlalchemy


def _key(study_name: str) -> int:
    return int.from_bytes(hashlib.blake2b(study_name.encode(), digest_size=8).digest(), "big", signed=True)


@contextlib.contextmanager
def study_lock(storage_url: str, study_name: str, journal: bool) -> Iterator[None]:
    if not journal and storage_url.startswith("postgresql"):
        engine = sqlalchemy.create_engine(storage_url)
        try:
            with engine.connect() as conn:
                conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"), {"k": _key(study_name)})
                try:
                    yield
                finally:
                    conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": _key(study_name)})
        finally:
            engine.dispose()
        return
    path = Path(storage_url if journal else sqlalchemy.engine.make_url(storage_url).database or "optuna")
    lock_file = path.with_name(path.name + f".{_key(study_name) & 0xFFFF:04x}.lock")
    with open(lock_file, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
