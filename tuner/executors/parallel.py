"""Independent simulated measurements side by side, in processes, up to the cores this process may use.

A simulated measurement (`executors.sim.SimExecutor`) is CPU work in this process on a virtual clock: its
result does not depend on when it runs or on what runs beside it, so measurements that do not feed each
other (the conclusion's rounds) can run at once. A real executor measures a device (one worker, one GPU) and
an HTTP executor a server: on those, measurements beside each other would disturb each other, so they run
one at a time.

    parent ── fork ──> worker 1: task 0, task 2, ...      the task function is inherited by the fork (the
           └─ fork ──> worker 2: task 1, ...              traffic and the profile with it: nothing pickled
                                                          on the way in); each result is pickled back

Workers ignore SIGINT (the parent decides; SIGTERM lets the pool end them) and, on Linux, die with the
parent. A stop is polled before the fork and after every result, so a signal that comes while results stream in
stops the map within seconds and no pool is forked after it; a worker forked just as it came inherits the stop
(its measurement raises `Interrupted`, which comes back whole and stops the map). A task's exception that could
not be rebuilt in the parent comes back as a RuntimeError that names it: rebuilding it there would end the pool's
result thread (its traceback printed). The pool is terminated only when the parent leaves the map by an exception
(a stop, a failed task); after the last result it is closed and joined, so no worker is signalled on the way out.
On by default; `PAGETUNE_PARALLEL_SIM=0` runs every measurement in this process. Results come back in task order,
whatever order they finish in. A process that has imported torch is never forked (its thread pools do not survive
a fork: the child can hang): the tuner's parent never imports it, so there the measurements run side by side.
"""

from __future__ import annotations

import copy
import ctypes
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from tuner.measure.measure import ONE_AT_A_TIME, Fan

__all__ = ["measurement_workers", "parallel_map", "probe_fan", "usable_cores"]

T = TypeVar("T")
_task: Callable[[int], Any] | None = None  # a pool worker's task function, set once when the worker starts
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
    (or already run in a pool worker: the conclusion's measurements)."""
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
    second while waiting, which may raise to stop (a signal): the pool is terminated on the way out. `here_first`:
    task 0 runs in this process (which counts as one of the workers) while the pool runs the others."""
    if workers <= 1 or count <= 1:
        return [_done(i, task(i), on_result) for i in range(count)]
    first = 1 if here_first else 0
    results: dict[int, T] = {}
    poll()  # a stop asked already would be inherited by the workers: none is forked
    pool = multiprocessing.get_context("fork").Pool(min(workers - first, count - first), initializer=_start,
                                                    initargs=(task,))
    try:
        pending = pool.imap_unordered(_run, range(first, count))
        if here_first:
            results[0] = _done(0, task(0), on_result)
        while len(results) < count:
            poll()  # every turn: results that keep coming within half a second must not hide a stop
            try:
                i, result = pending.next(timeout=0.5)
            except multiprocessing.TimeoutError:
                continue
            results[i] = _done(i, result, on_result)
    except BaseException:  # a stop (poll) or a failed task: the workers still busy are ended
        pool.terminate()
        pool.join()
        raise
    pool.close()  # every task done: the workers leave on their own, none is signalled
    pool.join()
    return [results[i] for i in range(count)]


def _done(i: int, result: T, on_result: Callable[[int, T], None]) -> T:
    on_result(i, result)
    return result


def _start(task: Callable[[int], Any]) -> None:
    """In a pool worker, once: its task function (inherited through fork), and signals left to the parent."""
    global _task
    _task = task
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # terminate() ends a worker at once, not the study's handler
    if sys.platform == "linux":  # a parent killed outright (SIGKILL, a timeout) takes its workers with it
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _run(i: int) -> tuple[int, Any]:
    """In a pool worker: task i, with its index. A failure goes back to the parent as an exception the parent can
    rebuild (`_rebuildable`)."""
    assert _task is not None
    try:
        return i, _task(i)
    except Exception as e:
        if _rebuildable(e):
            raise
        raise RuntimeError(f"{type(e).__name__}: {e}") from None


def _rebuildable(e: Exception) -> bool:
    """Whether `e` survives the pipe to the parent. One whose `__init__` does not take its `args` back fails to
    unpickle there, in the pool's result thread: the thread dies (its traceback printed) and the map waits on. A
    copy rebuilds it the same way (its `__reduce_ex__`: the class called with its args), without unpickling."""
    try:
        copy.copy(e)
    except Exception:
        return False
    return True
