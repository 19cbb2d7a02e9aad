"""The storage retry policy on a fake clock: waits, the bound, the messages, what is not retried."""

from __future__ import annotations

import logging

import optuna
import pytest
import sqlalchemy.exc

from tuner.store.retry import Outages, StorageUnavailable, storage_failure

URL = "postgresql+psycopg://tuner:s3cret@db:5432/optuna"


class Clock:
    def __init__(self) -> None:
        self.now, self.sleeps = 100.0, []

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


def _refused() -> optuna.exceptions.StorageInternalError:
    """What RDBStorage raises for a dropped connection: Optuna's symptom on top of the driver's cause."""
    try:
        raise sqlalchemy.exc.OperationalError("SELECT 1", {}, ConnectionRefusedError("connection refused"))
    except sqlalchemy.exc.OperationalError as cause:
        try:
            raise optuna.exceptions.StorageInternalError("invalid data in the commit") from cause
        except optuna.exceptions.StorageInternalError as err:
            return err


def _failing(times: int):
    calls = []

    def fn() -> int:
        calls.append(1)
        if len(calls) <= times:
            raise _refused()
        return 5
    return fn, calls


def test_an_outage_within_the_bound_is_waited_out_with_backoff_and_said_once(caplog):
    clock = Clock()
    outages = Outages(URL, 120, clock=lambda: clock.now, sleep=clock.sleep)
    fn, calls = _failing(4)
    with caplog.at_level(logging.WARNING, logger="pagetune"):
        assert outages.call(fn) == 5
    assert len(calls) == 5 and clock.sleeps == [0.5, 1.0, 2.0, 4.0]
    assert [r.getMessage() for r in caplog.records] == [
        "waiting for storage postgresql+psycopg://tuner:***@db:5432/optuna: ConnectionRefusedError: connection "
        "refused (retrying for up to 120 s, storage.retry_s)",
        "storage postgresql+psycopg://tuner:***@db:5432/optuna is back after 7.5 s"]


def test_past_the_bound_the_storage_gives_up_for_good_naming_the_root_cause():
    clock = Clock()
    outages = Outages(URL, 3, clock=lambda: clock.now, sleep=clock.sleep)
    fn, calls = _failing(100)
    with pytest.raises(StorageUnavailable) as err:
        outages.call(fn)
    assert clock.sleeps == [0.5, 1.0, 1.5]  # the last wait cut to the bound
    expected = ("storage postgresql+psycopg://tuner:***@db:5432/optuna unreachable for more than 3 s "
                "(storage.retry_s): ConnectionRefusedError: connection refused")
    assert str(err.value) == expected
    with pytest.raises(StorageUnavailable):  # later calls fail at once: no second wait
        outages.call(lambda: 1)
    assert len(calls) == 4
    try:  # Optuna's own error on top of it (UnboundLocalError in _run_trial) still reads as the cause
        try:
            raise err.value
        finally:
            raise UnboundLocalError("cannot access local variable 'updated_state'")
    except UnboundLocalError as symptom:
        assert storage_failure(symptom, URL) == expected


def test_other_errors_are_not_retried():
    clock = Clock()
    outages = Outages(URL, 120, clock=lambda: clock.now, sleep=clock.sleep)

    def broken() -> None:
        raise ValueError("not a fault of the storage")
    with pytest.raises(ValueError):
        outages.call(broken)
    assert clock.sleeps == []
    assert storage_failure(ValueError("x"), URL) is None
    dropped = sqlalchemy.exc.OperationalError("SELECT 1", {}, ConnectionRefusedError("connection refused"))
    assert storage_failure(dropped, URL) == (  # met outside the retried calls (the lock taken at opening)
        "storage postgresql+psycopg://tuner:***@db:5432/optuna unreachable: ConnectionRefusedError: connection refused")


def test_a_retried_state_change_that_had_committed_counts_as_done():
    clock = Clock()
    outages = Outages(URL, 120, clock=lambda: clock.now, sleep=clock.sleep)
    attempts = []

    def tell() -> bool:  # committed, then the connection dropped; the retry finds the trial finished
        attempts.append(1)
        if len(attempts) == 1:
            raise _refused()
        raise optuna.exceptions.UpdateFinishedTrialError("trial 3 is already finished")
    assert outages.call(tell, done_already=lambda: True) is True
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):  # finished by someone else, in another state
        outages.call(tell, done_already=lambda: False)
