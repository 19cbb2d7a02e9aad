"""Storage faults survived: every Optuna storage call retried with backoff while the database is away.

    Optuna (study, trial, heartbeat thread)
          |  every BaseStorage / BaseHeartbeat call
          v
    RetryingStorage --(operational error: refused, reset, admin shutdown)--> wait, retry, ...
          |                                                                   up to storage.retry_s
          v                                                                   from the outage's start
    _CachedStorage(RDBStorage(pool_pre_ping))                                 then StorageUnavailable

Only operational faults are retried (the server is down, restarting, or dropped the connection):
SQLAlchemy's OperationalError, InterfaceError and DisconnectionError, psycopg's OperationalError,
found anywhere in the exception's chain (RDBStorage re-raises them as StorageInternalError, "invalid
data in the commit", which is the symptom, not the cause). Anything else is raised at once.

One outage is said once ("waiting for storage ..."), whichever thread meets it first, and its end once.
Past the bound the storage gives up for good: every later call raises the same `StorageUnavailable`
at once, so Optuna's own error handling (which calls the storage again) cannot add another wait.

A retried write whose first attempt did commit (the connection dropped after the commit): a repeated
state change finds the trial already in that state and counts as done.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import sqlalchemy.exc
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import BaseStorage
from optuna.storages._heartbeat import BaseHeartbeat

from tuner.redact import describe_error, mask_url

__all__ = ["Outages", "RetryingStorage", "StorageUnavailable", "describe_cause", "operational_cause"]

log = logging.getLogger("pagetune")

_FIRST_WAIT_S = 0.5
_MAX_WAIT_S = 5.0
T = TypeVar("T")


class StorageUnavailable(RuntimeError):
    """The study's storage stayed unreachable past `storage.retry_s`; the message names it (masked) and the cause."""


def _operational_types() -> tuple[type[BaseException], ...]:
    types: list[type[BaseException]] = [sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError,
                                        sqlalchemy.exc.DisconnectionError]
    try:
        import psycopg
        types.append(psycopg.OperationalError)
    except ImportError:  # the driver is optional: SQLite needs none
        pass
    return tuple(types)


_OPERATIONAL = _operational_types()


def _chain(err: BaseException | None) -> Iterator[BaseException]:
    """`err`, then its causes and contexts, each once."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


def operational_cause(err: BaseException) -> BaseException | None:
    """The deepest operational fault in `err`'s chain (the root cause), or None when it is not one."""
    return next((e for e in reversed(list(_chain(err))) if isinstance(e, _OPERATIONAL)), None)


def describe_cause(err: BaseException) -> str:
    """One line: the driver's own error when SQLAlchemy wraps one, masked."""
    return describe_error(getattr(err, "orig", None) or err)


class Outages:
    """The retry policy of one storage: calls retried with backoff while it is away, up to `retry_s` per outage."""

    def __init__(self, url: str, retry_s: float, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, what: str = "storage") -> None:
        self.url = mask_url(url)
        self.retry_s = retry_s
        self.what = what  # the name the messages give it: "storage", "MLflow tracking store"
        self._clock, self._sleep = clock, sleep
        self._lock = threading.Lock()
        self._since: float | None = None  # when the current outage began (None: the storage answers)
        self._gave_up: StorageUnavailable | None = None

    def call(self, fn: Callable[[], T], done_already: Callable[[], bool] | None = None) -> T:
        """`fn()`, retried through an outage. `done_already()` tells whether a retried write that Optuna refuses
        as finished (UpdateFinishedTrialError) had in fact committed on its first attempt."""
        if self._gave_up is not None:
            raise self._gave_up
        wait, retried = _FIRST_WAIT_S, False
        while True:
            try:
                result = fn()
            except UpdateFinishedTrialError:
                if retried and done_already is not None and done_already():
                    return True  # type: ignore[return-value]  # set_trial_state_values' answer
                raise
            except Exception as err:
                cause = operational_cause(err)
                if cause is None:
                    raise
                remaining = self._outage(cause)
                if remaining <= 0:
                    raise self._give_up(cause) from None
                self._sleep(min(wait, remaining))
                wait, retried = min(2 * wait, _MAX_WAIT_S), True
                continue
            self._recovered()
            return result

    def _outage(self, cause: BaseException) -> float:
        """Note the outage (said once); the seconds left before giving up (none: no retries, nothing to say)."""
        if self.retry_s <= 0:
            return 0.0
        with self._lock:
            if self._since is None:
                self._since = self._clock()
                log.warning("waiting for %s %s: %s (retrying for up to %g s, storage.retry_s)", self.what, self.url,
                            describe_cause(cause), self.retry_s)
            return self._since + self.retry_s - self._clock()

    def _recovered(self) -> None:
        if self._since is None:
            return
        with self._lock:
            if self._since is not None:
                log.warning("%s %s is back after %.1f s", self.what, self.url, self._clock() - self._since)
                self._since = None

    def _give_up(self, cause: BaseException) -> StorageUnavailable:
        with self._lock:
            if self._gave_up is None:
                self._gave_up = StorageUnavailable(
                    f"{self.what} {self.url} unreachable for more than {self.retry_s:g} s (storage.retry_s): "
                    f"{describe_cause(cause)}")
            return self._gave_up

    def reset(self) -> None:
        """Retry again after giving up (the store was seen back by other means)."""
        with self._lock:
            self._gave_up, self._since = None, None


class RetryingStorage(BaseStorage, BaseHeartbeat):
    """Delegates every call to `inner` through `outages` (one policy shared by every thread)."""

    def __init__(self, inner: BaseStorage, outages: Outages) -> None:
        self._inner = inner
        self.outages = outages

    def _call(self, target: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        done = None
        if name == "set_trial_state_values":
            def done() -> bool:
                trial_id = kwargs.get("trial_id", args[0] if args else None)
                state = kwargs.get("state", args[1] if len(args) > 1 else None)
                return self._inner.get_trial(trial_id).state == state
        return self.outages.call(lambda: getattr(target, name)(*args, **kwargs), done)

    # BaseHeartbeat: Optuna beats (and finds stale trials) only when the inner RDB storage does.
    @property
    def _heartbeat_backend(self) -> Any:
        return getattr(self._inner, "_backend", self._inner)  # _CachedStorage keeps the RDBStorage there

    def get_heartbeat_interval(self) -> int | None:
        inner = self._heartbeat_backend
        return inner.get_heartbeat_interval() if isinstance(inner, BaseHeartbeat) else None

    def get_heartbeat_stale_trial_callback(self) -> Any:
        inner = self._heartbeat_backend
        return inner.get_heartbeat_stale_trial_callback() if isinstance(inner, BaseHeartbeat) else None

    def record_heartbeat(self, trial_id: int) -> None:
        """Optuna's heartbeat thread: retried like any call; past the bound it stops quietly (a traceback of
        its thread would hide the one-line error the main thread gives on its next call)."""
        with contextlib.suppress(StorageUnavailable):
            self._call(self._heartbeat_backend, "record_heartbeat", trial_id)

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        return self._call(self._heartbeat_backend, "_get_stale_trial_ids", study_id)


def _delegate(name: str) -> Callable[..., Any]:
    def method(self: RetryingStorage, *args: Any, **kwargs: Any) -> Any:
        return self._call(self._inner, name, *args, **kwargs)

    method.__name__ = name
    return method


# Every storage call Optuna makes, abstract or not (get_n_trials, check_trial_is_updatable...): all retried.
for _name in [n for n, v in vars(BaseStorage).items() if not n.startswith("_") and callable(v)]:
    setattr(RetryingStorage, _name, _delegate(_name))
abc.update_abstractmethods(RetryingStorage)

if RetryingStorage.__abstractmethods__:  # pragma: no cover - Optuna grew an abstract method
    raise ImportError(f"RetryingStorage does not delegate {sorted(RetryingStorage.__abstractmethods__)}")


def storage_failure(err: BaseException, url: str) -> str | None:
    """The one line that says the storage at `url` failed, when it is what stopped the job (anywhere in `err`'s
    chain: Optuna's own handling may raise another error on top of it); None for any other error."""
    unavailable = next((e for e in _chain(err) if isinstance(e, StorageUnavailable)), None)
    if unavailable is not None:
        return str(unavailable)
    cause = operational_cause(err)
    return None if cause is None else f"storage {mask_url(url)} unreachable: {describe_cause(cause)}"
