"""Rank 0's side of tensor parallelism: the other ranks' processes, started, watched and stopped.

`RankProcesses(config)` spawns ranks 1..n-1 (`runtime.distributed.worker`), waits for each to say hello
(a rank that dies or fails on the way is an error at once, not at a rendezvous timeout) and joins the
process group as rank 0. Every wait watches the processes: a dead rank, or one that sent its traceback,
becomes one `RankFailedError` naming the rank, and `close()` then stops every other rank (SIGKILL after
`STOP_WAIT_S`). A finalizer closes the ranks when the engine is dropped or the interpreter exits.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import weakref
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from runtime.config import EngineConfig
from runtime.distributed.group import RankGroup, host_store, rank_device, turn_nvls_off
from runtime.distributed.worker import Failed, Hello, Ready, RunnerPlan, worker_main

__all__ = ["RankFailedError", "RankProcesses"]

START_TIMEOUT_S = 600.0  # a rank's hello, and its ready (the weights loaded: an 8B model from disk), at most
STOP_WAIT_S = 5.0  # how long close() lets a rank exit on its own before killing it
DEATH_WAIT_S = 2.0  # after a failed step: how long a rank's death may take to show


class RankFailedError(RuntimeError):
    """A tensor-parallel rank died, failed or stopped answering: the engine stopped, every rank with it."""


class RankProcesses:
    def __init__(self, config: EngineConfig) -> None:
        import torch  # noqa: F401 (the store and the group are torch's)

        from runtime.placement import resolve_device

        turn_nvls_off()  # inherited by the ranks, and read by this process's NCCL
        size = config.tensor_parallel_size
        store = host_store(size)
        ctx = multiprocessing.get_context("spawn")  # CUDA cannot fork
        self.procs: list[BaseProcess] = []
        self.conns: list[Connection] = []
        for rank in range(1, size):
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(target=worker_main, args=(config, rank, store.port, theirs, os.getpid()),
                               name=f"pagetune-tp-rank{rank}", daemon=True)
            proc.start()
            theirs.close()
            self.procs.append(proc)
            self.conns.append(mine)
        self._finalizer = weakref.finalize(self, _stop, self.procs, self.conns)
        try:
            self._expect(Hello, START_TIMEOUT_S)
            self.group = RankGroup(store, 0, size, rank_device(resolve_device(config.device), 0))
        except BaseException:
            self.close()
            raise
        self._store = store  # the rendezvous's host lives as long as the group

    def start_runners(self, plan: RunnerPlan) -> None:
        """Every rank builds its model runner to `plan`; returns once all are ready."""
        self.send(plan)
        self._expect(Ready, START_TIMEOUT_S)

    def send(self, message: Any) -> None:
        """`message` to every rank (a dead one is an error here, before rank 0 waits on it in a collective)."""
        dead = self.failure(wait_s=0.0)
        if dead is not None:
            raise dead
        for conn in self.conns:
            conn.send(message)

    def failure(self, wait_s: float = DEATH_WAIT_S) -> RankFailedError | None:
        """The first rank that failed or died (waiting up to `wait_s` for one to), or None. The ranks send
        nothing while they step, so anything on a pipe is a failure."""
        ready = wait(self.conns + [p.sentinel for p in self.procs], timeout=wait_s)
        for rank, (conn, proc) in enumerate(zip(self.conns, self.procs), start=1):
            if conn in ready or proc.sentinel in ready or not proc.is_alive():
                return _rank_error(rank, proc, _read(conn))
        return None

    def close(self) -> None:
        """Stop every rank (idempotent)."""
        self._finalizer()

    def _expect(self, kind: type, timeout: float) -> None:
        for rank, (conn, proc) in enumerate(zip(self.conns, self.procs), start=1):
            if not wait([conn, proc.sentinel], timeout=timeout):
                raise RankFailedError(f"tensor-parallel rank {rank} did not answer within {timeout:.0f} s")
            message = _read(conn)
            if not isinstance(message, kind):
                raise _rank_error(rank, proc, message)


def _read(conn: Connection) -> Any:
    """What waits on a rank's pipe, or None (nothing, or its end closed)."""
    try:
        return conn.recv() if conn.poll() else None
    except (EOFError, OSError):
        return None


def _rank_error(rank: int, proc: BaseProcess, message: Any) -> RankFailedError:
    if isinstance(message, Failed):
        return RankFailedError(f"tensor-parallel rank {rank} failed; the engine stopped. Its traceback:\n"
                               f"{message.error}")
    if message is None:
        return RankFailedError(f"tensor-parallel rank {rank} (pid {proc.pid}) {_exit_status(proc)}; "
                               "the engine stopped")
    return RankFailedError(f"tensor-parallel rank {rank} sent {message!r} out of turn; the engine stopped")


def _exit_status(proc: BaseProcess) -> str:
    proc.join(timeout=DEATH_WAIT_S)
    code = proc.exitcode
    if code is None:
        return "stopped answering"
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


def _stop(procs: list[BaseProcess], conns: list[Connection]) -> None:
    for conn in conns:
        with contextlib.suppress(OSError):
            conn.send(None)
        conn.close()
    for proc in procs:
        proc.join(timeout=STOP_WAIT_S)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=STOP_WAIT_S)

