"""A lock shared by every worker of one store, for the few steps that must not race.

Used to enqueue the study's baseline exactly once and to create MLflow's tables once.
PostgreSQL: a session-level advisory lock (workers may be on several machines).
SQLite or a journal file: a byte-range lock (fcntl) in one file beside it, `<store>.pagetune-lock`, one
byte per lock name (workers on one machine). The last holder removes the file: it does so only while
it holds the whole file (nobody else holds a byte), and a process that waited on a file since removed
sees that its file is no longer the one at the path and locks the new one.
Other stores (an MLflow server over HTTP) serialise on their own: no lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
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
    while True:
        handle = open(path, "a")  # noqa: SIM115 (closed below, after the unlock)
        fcntl.lockf(handle, fcntl.LOCK_EX, 1, offset, 0)
        if _is_at(handle, path):
            break
        handle.close()  # the file was removed while this process waited: lock the one at the path now
    try:
        yield
    finally:
        fcntl.lockf(handle, fcntl.LOCK_UN, 1, offset, 0)
        _remove_if_unused(handle, path)
        handle.close()


def _is_at(handle, path: Path) -> bool:
    """Whether the open file is still the one at `path` (not removed, not replaced)."""
    try:
        return path.stat().st_ino == os.fstat(handle.fileno()).st_ino
    except FileNotFoundError:
        return False


def _remove_if_unused(handle, path: Path) -> None:
    try:
        fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB, 0, 0, 0)  # the whole file: free only if no one holds
    except OSError:
        return  # another process holds a lock in it: it removes the file when it is done
    if _is_at(handle, path):
        path.unlink()
    fcntl.lockf(handle, fcntl.LOCK_UN, 0, 0, 0)


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
    # Not `<store>.lock`: Optuna's journal backend takes that name for its own lock (by the file's existence).
    return _range_lock(path.with_name(f"{path.name}.pagetune-lock"), _key(name) & 0xFFFF)
