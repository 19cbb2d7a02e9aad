"""A lock shared by every worker of one store, for the few steps that must not race.

Used to enqueue the study's baseline exactly once and to create MLflow's tables once.
PostgreSQL: a session-level advisory lock (workers may be on several machines).
SQLite or a journal file: a byte-range lock (fcntl) in one file beside it, `<store>.lock`, one byte
per lock name (workers on one machine); the file stays, as SQLite's own journal does, since removing a
lock file another process may be waiting on would break the lock.
Other stores (an MLflow server over HTTP) serialise on their own: no lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
from collections.abc import Iterator
from pathlib import Path

import sqlalchemy


def _key(name: str) -> int:
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big", signed=True)


@contextlib.contextmanager
def _advisory(url: str, key: int) -> Iterator[None]:
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as conn:
            conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"), {"k": key})
            try:
                yield
            finally:
                conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
    finally:
        engine.dispose()


@contextlib.contextmanager
def _range_lock(path: Path, offset: int) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.lockf(handle, fcntl.LOCK_EX, 1, offset, 0)
        try:
            yield
        finally:
            fcntl.lockf(handle, fcntl.LOCK_UN, 1, offset, 0)


def store_lock(url: str, name: str) -> contextlib.AbstractContextManager[None]:
    """Exclusive section named `name` among every process using the store at `url` (a URL or a file path)."""
    if url.startswith("postgresql"):
        return _advisory(url, _key(name))
    if url.startswith("sqlite:"):
        database = sqlalchemy.engine.make_url(url).database
        if not database or database == ":memory:":
            return contextlib.nullcontext()
        path = Path(database)
    elif "://" in url:
        return contextlib.nullcontext()
    else:
        path = Path(url)
    return _range_lock(path.with_name(f"{path.name}.lock"), _key(name) & 0xFFFF)
