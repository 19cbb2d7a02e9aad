"""Independent simulated measurements side by side, in processes, up to the cores this process may use.

A simulated measurement (`executors.sim.SimExecutor`) is CPU work in this process on a virtual clock: its
result does not depend on when it runs or on what runs beside it, so measurements that do not feed each
other (the conclusion's rounds) can run at once. A real executor measures a device (one worker, one GPU) and
an HTTP executor a server: on those, measurements beside each other would disturb each other, so they run
one at a time.

    parent ── fork ──> worker 1 ── its own pipe: index 0 ->, <- (0, ok, result); index 2 ->, ...; None -> leave
           └─ fork ──> worker 2 ── its own pipe: index 1 ->, <- (1, ok, result); ...
                                   the task function is inherited by the fork (the traffic and the profile
                                   with it: nothing pickled on the way in); each result is pickled back

The parent hands a worker the next task index when it is free and waits on all the pipes at once. Not
`multiprocessing.Pool`: a worker it terminates while writing to the shared result queue leaves that queue's
lock held and terminate() hangs (seen in about 3% of stops under load); here no lock is shared between processes.
Workers ignore SIGINT (the parent decides; SIGTERM ends them at once) and, on Linux, die with the parent. A stop
is polled before the fork, after every result and every half second, so a signal that comes while results stream
in stops the map within seconds and no worker is forked after it; a worker forked just as it came inherits the
stop (its measurement raises `Interrupted`, which comes back whole and stops the map). A task's exception that
could not be rebuilt in the parent comes back as a RuntimeError that names it, and a worker that dies without its
result fails the map with its exit code. The workers are killed only when the parent leaves the map by an
exception (a stop, a failed task, a dead worker): nothing of theirs is kept, and no lock can be left held; after
the last result each is told to leave and joined, so no worker is signalled on the way out. On by default;
`PAGETUNE_PARALLEL_SIM=0` runs every measurement in this process. Results come back in task order, whatever order
they finish in. A process that has imported torch is never forked (its thread pools do not survive a fork: the
child can hang): the tuner's parent never imports it, so there the measurements run side by side.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import multiprocessing
import os
import signal
import sys
import traceback
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from multiprocessing.reduction import ForkingPickler
from typing import Any, NamedTuple, TypeVar

from tuner.measure.measure import ONE_AT_A_TIME, Fan

__all__ = ["measurement_workers", "parallel_map", "probe_fan", "usable_cores"]

T = TypeVar("T")
WAIT_S = 0.5  # the longest the parent waits on its workers between polls
_PR_SET_PDEATHSIG = 1  # prctl(2): the signal this process gets when its parent dies


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the platform has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def measurement_workers(executor: object, tasks: int) -> int:
    """How many of `tasks` measurements on `executor` may run at once: simulated ones (an executor whose
    `side_by_side` is true) up to the cores, where processes can be forked safely; any other one at a time."""
    if not getattr(executor, "side_by_side", False) or not _can_fork():
        return 1
    return max(1, min(tasks, usable_cores()))


def probe_fan(poll: Callable[[], None]) -> Fan:
    """A simulated measurement's probes side by side, up to the cores (`measure.Fan`): the first of a batch here
    (its progress shows), the others in forked processes; one at a time where processes cannot be forked safely
    (or already run in a map's worker: the conclusion's measurements)."""
    width = usable_cores() if _can_fork() else 1
    if width <= 1:
        return ONE_AT_A_TIME
    return Fan(width, lambda task, count: parallel_map(task, count, width, poll=poll, here_first=True))


def _can_fork() -> bool:
    """Fork is there, torch is not imported (its thread pools do not survive a fork), this is no pool worker
    (a daemon process may not have children), and PAGETUNE_PARALLEL_SIM=0 does not turn it off."""
    return ("fork" in multiprocessing.get_all_start_methods() and "torch" not in sys.modules
            and not multiprocessing.current_process().daemon and os.environ.get("PAGETUNE_PARALLEL_SIM") != "0")


def parallel_map(task: Callable[[int], T], count: int, workers: int,
                 on_result: Callable[[int, T], None] = lambda i, r: None,
                 poll: Callable[[], None] = lambda: None, here_first: bool = False) -> list[T]:
    """[task(0), ..., task(count - 1)], on `workers` forked processes (in this one when 1). In this process:
    `on_result(i, result)` as each task finishes, and `poll()` before the fork, after each result and every half
    second while waiting, which may raise to stop (a signal): the workers are killed on the way out. `here_first`:
    task 0 runs in this process (which counts as one of the workers) while the workers run the others."""
    if workers <= 1 or count <= 1:
        return [_done(i, task(i), on_result) for i in range(count)]
    first = 1 if here_first else 0
    poll()  # a stop asked already would be inherited by the workers: none is forked
    forked: list[_Worker] = []
    try:
        for _ in range(min(workers - first, count - first)):
            forked.append(_fork(task))  # one by one: those forked before a failure are killed
        results = _gather(task, count, first, forked, on_result, poll)
    except BaseException:  # a stop (poll), a failed task or a dead worker: the workers still busy are ended
        _kill(forked)
        raise
    _release(forked)  # every task done: each is told to leave, none is signalled
    return [results[i] for i in range(count)]


class _Worker(NamedTuple):
    process: BaseProcess
    conn: Connection  # the parent's end of this worker's own pipe


class _Failure(NamedTuple):
    """A task's exception, with the worker's traceback (text: a traceback cannot be pickled)."""

    error: Exception
    trace: str


class _RemoteTraceback(Exception):
    """The worker's traceback, as the cause of the exception raised here."""

    def __str__(self) -> str:
        return str(self.args[0])


def _done(i: int, result: T, on_result: Callable[[int, T], None]) -> T:
    on_result(i, result)
    return result


def _fork(task: Callable[[int], Any]) -> _Worker:
    """A worker, forked with `task` (inherited, not pickled) and its own pipe."""
    here, there = multiprocessing.Pipe()
    process = multiprocessing.get_context("fork").Process(target=_serve, args=(task, there), daemon=True)
    process.start()
    there.close()  # its end lives in the worker alone: the worker's death is EOF here, not a wait
    return _Worker(process, here)


def _gather(task: Callable[[int], T], count: int, first: int, forked: list[_Worker],
            on_result: Callable[[int, T], None], poll: Callable[[], None]) -> dict[int, T]:
    """Every task's result by index: one index at a time to each free worker, task 0 here when `first`."""
    todo = iter(range(first, count))
    busy = {w.conn: w for w in forked if _hand(w, todo)}
    results: dict[int, T] = {}
    if first:
        results[0] = _done(0, task(0), on_result)
    while len(results) < count:
        poll()  # every turn: results that keep coming within half a second must not hide a stop
        for k, conn in enumerate(wait(list(busy), timeout=WAIT_S)):
            if k:
                poll()  # after each result, also among those that came at once
            worker = busy[conn]
            i, result = _receive(worker, poll)
            if not _hand(worker, todo):
                del busy[worker.conn]
            results[i] = _done(i, result, on_result)
    return results


def _hand(worker: _Worker, todo: Iterator[int]) -> bool:
    """The next task to `worker`; False when none is left."""
    i = next(todo, None)
    if i is None:
        return False
    worker.conn.send(i)
    return True


def _receive(worker: _Worker, poll: Callable[[], None]) -> tuple[int, Any]:
    """A worker's (index, result); its task's exception raised here, or a RuntimeError when it died."""
    try:
        i, ok, value = worker.conn.recv()
    except EOFError:
        poll()  # the signal that killed it may be the study's stop: the stop wins
        raise RuntimeError(f"a map worker died without its result ({_exit(worker.process)})") from None
    if not ok:
        raise value.error from _RemoteTraceback(value.trace)
    return i, value


def _exit(process: BaseProcess) -> str:
    process.join(5)  # its pipe is closed: it is gone or going
    code = process.exitcode
    if code is not None and code < 0:
        return f"exit code {code}: {signal.Signals(-code).name}"
    return f"exit code {code}"


def _kill(forked: list[_Worker]) -> None:
    """Workers ended at once: SIGKILL (nothing of theirs is kept, and they share no lock to leave held)."""
    for w in forked:
        w.process.kill()
    _join(forked)


def _release(forked: list[_Worker]) -> None:
    """Workers told to leave (None), and joined."""
    for w in forked:
        with contextlib.suppress(OSError):  # gone already: every result is in
            w.conn.send(None)
    _join(forked)


def _join(forked: list[_Worker]) -> None:
    for w in forked:
        w.process.join()
        w.process.close()
        w.conn.close()


def _serve(task: Callable[[int], Any], conn: Connection) -> None:
    """In a worker: task after task by index from the parent, each outcome sent back, until None."""
    _leave_signals_to_parent()
    while (i := _next(conn)) is not None:
        conn.send_bytes(_pickled(i, _outcome(task, i)))


def _leave_signals_to_parent() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a SIGTERM ends a worker at once, not the study's handler
    if sys.platform == "linux":  # a parent killed outright (SIGKILL, a timeout) takes its workers with it
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _next(conn: Connection) -> int | None:
    try:
        return conn.recv()
    except EOFError:  # the parent's end closed: nothing more to do
        return None


def _outcome(task: Callable[[int], Any], i: int) -> tuple[int, bool, Any]:
    """In a worker: (i, True, task i's result), or (i, False, its failure) as an exception the parent can
    rebuild (`_rebuildable`)."""
    try:
        return i, True, task(i)
    except Exception as e:
        error = e if _rebuildable(e) else _named(e)
        return i, False, _Failure(error, traceback.format_exc())


def _pickled(i: int, outcome: tuple[int, bool, Any]) -> memoryview:
    """`outcome` as the pipe carries it; one that cannot be pickled (a result, an exception's attribute) as a
    RuntimeError that names it."""
    try:
        return ForkingPickler.dumps(outcome)
    except Exception as e:
        _, ok, value = outcome
        failure = (_Failure(RuntimeError(f"task {i}'s result cannot be pickled: {type(e).__name__}: {e}"), "")
                   if ok else _Failure(_named(value.error), value.trace))
        return ForkingPickler.dumps((i, False, failure))


def _named(e: BaseException) -> RuntimeError:
    return RuntimeError(f"{type(e).__name__}: {e}")


def _rebuildable(e: Exception) -> bool:
    """Whether `e` survives the pipe to the parent. One whose `__init__` does not take its `args` back fails to
    unpickle there (and raises a different error than its own). A copy rebuilds it the same way (its
    `__reduce_ex__`: the class called with its args), without unpickling."""
    try:
        copy.copy(e)
    except Exception:
        return False
    return True
