"""Parent side of trial isolation: start the worker, hand it a trial, survive whatever happens to it.

A trial that raises or runs out of memory comes back as an outcome; a worker that dies (a crash,
SIGKILL) or a trial past its timeout costs the worker, which is replaced before the next trial.
Either way the study goes on. A signal (`tuner.interrupts`) stops the worker within half a second and
raises `Interrupted`: the study decides what that means. This module imports no torch: the worker's
module is imported in the worker process only (`_worker_entry`). The `Executor` protocol is
`tuner.executors.base`'s.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import time
from collections.abc import Sequence

from runtime import EngineConfig
from tuner.executors.base import OnCheckpoint, OnProgress, WorkerStartError
from tuner.interrupts import Interrupts, ignore_in_worker
from tuner.measure.job import Hardware, TrialJob, TrialOutcome, TrialStatus
from tuner.traffic import TrafficRequest

_PIPE_ERRORS = (EOFError, OSError)  # the worker's end of the pipe is gone (BrokenPipeError, resets: OSError)

def _worker_entry(conn, cpu_threads: int | None, memory_limit_gb: float | None) -> None:
    ignore_in_worker()  # SIGINT/SIGTERM are the parent's: it stops this process itself
    from tuner.executors.worker import worker_main  # torch is imported here, in the worker only

    worker_main(conn, cpu_threads, memory_limit_gb)


def _exit_reason(code: int | None) -> str:
    if code is not None and code < 0:
        return f"worker process killed by {signal.Signals(-code).name}"
    return f"worker process exited with code {code}"


class WorkerSupervisor:
    def __init__(self, cpu_threads: int | None = None, memory_limit_gb: float | None = None,
                 interrupts: Interrupts | None = None) -> None:
        self.cpu_threads = cpu_threads
        self.memory_limit_gb = memory_limit_gb
        self.interrupts = interrupts or Interrupts()  # polled while a trial runs
        self._ctx = mp.get_context("spawn")  # no inherited MLflow/SQLAlchemy/CUDA state
        self._proc = None
        self._conn = None
        self._sent: set[str] = set()
        self.restarts = 0

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _start(self) -> None:
        parent, child = self._ctx.Pipe()
        self._proc = self._ctx.Process(target=_worker_entry, args=(child, self.cpu_threads, self.memory_limit_gb),
                                       daemon=True, name="pagetune-worker")
        self._proc.start()
        child.close()
        self._conn, self._sent = parent, set()

    def kill(self) -> None:
        """Stop the worker now (a forced exit): it ignores SIGINT/SIGTERM."""
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()

    def _ensure(self) -> None:
        if self._proc is None or not self._proc.is_alive():
            self._start()

    def _discard(self) -> None:
        self.kill()
        if self._proc is not None:
            self._proc.join(timeout=10)
        self._proc, self._conn = None, None
        self.restarts += 1

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        if self._proc is not None:
            self._proc.join(timeout=5)
            if self._proc.is_alive():
                self._proc.kill()
        self._proc, self._conn = None, None

    def describe(self, config: EngineConfig) -> Hardware:
        """The device the worker runs `config` on (it starts the worker, so the first trial does not)."""
        self._ensure()
        try:
            self._conn.send(("describe", config))
            return self._conn.recv()[1]
        except _PIPE_ERRORS:
            code = self._died().reason
            raise WorkerStartError(f"the trial worker could not start ({code}); its error is printed above") from None

    def run(self, job: TrialJob, requests: Sequence[TrafficRequest], on_progress: OnProgress,
            on_checkpoint: OnCheckpoint, timeout_s: float) -> TrialOutcome:
        """Run `job` in the worker; never raises for anything the trial or the worker does."""
        self._ensure()
        try:
            if job.traffic_key not in self._sent:
                self._conn.send(("traffic", job.traffic_key, tuple(requests)))
                self._sent.add(job.traffic_key)
            self._conn.send(("job", job))
            return self._wait(on_progress, on_checkpoint, timeout_s)
        except _PIPE_ERRORS:
            if self._proc is None:  # raised by a callback, the worker already discarded: not a worker death
                raise
            return self._died()

    def _wait(self, on_progress: OnProgress, on_checkpoint: OnCheckpoint, timeout_s: float) -> TrialOutcome:
        deadline = time.monotonic() + timeout_s
        while True:
            if self.interrupts.requested:
                self._discard()  # it would finish the trial otherwise; the next run starts a fresh one
                self.interrupts.check()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._discard()
                return TrialOutcome(TrialStatus.timeout,
                                    reason=f"timed out after {timeout_s:g} s (tuner.trial_timeout_s)")
            if self._conn.poll(min(remaining, 0.5)):
                message = self._conn.recv()
                if message[0] == "result":
                    return message[1]
                self._answer(message, on_progress, on_checkpoint)
            elif not self._proc.is_alive():
                return self._died()

    def _answer(self, message: tuple, on_progress: OnProgress, on_checkpoint: OnCheckpoint) -> None:
        try:
            if message[0] == "progress":
                on_progress(*message[1:])
                return
            keep = on_checkpoint(message[1])
        except BaseException:
            self._discard()  # it may wait for our answer; kept, it would answer the next job with this result
            raise
        self._conn.send(("continue",) if keep else ("stop",))

    def _died(self) -> TrialOutcome:
        if self._proc is not None:
            self._proc.join(timeout=5)  # the pipe closes before the dead process is reaped: wait for its exit code
        code = self._proc.exitcode if self._proc is not None else None
        self._discard()
        return TrialOutcome(TrialStatus.died, reason=_exit_reason(code))
