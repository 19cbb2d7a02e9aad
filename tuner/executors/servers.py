"""Servers started for one trial, measured over HTTP as one deployment, stopped: what `executor=vllm` (one
`vllm serve`) and a real deployment of replicas (one `python -m runtime.serve` each) share.

    start     every server at once, a thread each; the trial's setup_s (its overhead) is until the last is ready.
              The first that fails stops the others and fails the trial with its own last log lines
    measure   `HttpExecutor` over their URLs (several: behind the replay's least-outstanding-requests dispatcher)
    died      a server gone (seen between replays, and at the end) fails the trial: "died while measured: " and its
              log's tail; the replays left are not made
    stop      every server, after the trial, and within half a second of a signal (the trial then raises
              Interrupted, as the worker's does)
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from tuner.executors.base import OnCheckpoint, OnProgress
from tuner.executors.http import HttpExecutor
from tuner.executors.server_process import ServerProcess, ServerStartError
from tuner.interrupts import Interrupts
from tuner.measure.job import TrialJob, TrialOutcome, TrialStatus
from tuner.traffic import TrafficRequest

__all__ = ["ServerSet", "trial_name"]

SIGNAL_POLL_S = 0.5


def trial_name(starts: int, job: TrialJob) -> str:
    """What a start's config file and logs are named: its order, then the trial (a round after the search)."""
    return f"{starts:03d}-" + (f"trial-{job.number}" if job.number >= 0 else f"round-{-job.number}")


class ServerSet:
    def __init__(self, servers: Sequence[ServerProcess]) -> None:
        logging.getLogger("httpx2").setLevel(logging.WARNING)  # the readiness polls: not a line each on the console
        self.servers = list(servers)

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def start(self, config_file: Path, logs: Sequence[Path]) -> float:
        """Start every server on `config_file` (server i logging to logs[i]) and wait until all serve; the seconds
        it took. Raises the first ServerStartError, every server stopped."""
        began = time.monotonic()
        failed: list[ServerStartError] = []  # in the order they failed: the first is the cause, the rest stopped by it

        def start_one(server: ServerProcess, log: Path) -> None:
            try:
                server.start(config_file, log)
            except ServerStartError as e:
                failed.append(e)
                self.stop()

        threads = [threading.Thread(target=start_one, args=(s, log), daemon=True)
                   for s, log in zip(self.servers, logs, strict=True)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if failed:
            self.stop()
            raise failed[0]
        return time.monotonic() - began

    def crashed(self) -> str | None:
        """Why the first server that is gone went (its exit and last log lines), or None while all run."""
        return next((why for s in self.servers if (why := s.crashed()) is not None), None)

    def stop(self) -> None:
        """Every server at once: each is SIGTERMed, then SIGKILLed after its grace, until its whole group is gone."""
        threads = [threading.Thread(target=s.stop, daemon=True) for s in self.servers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def run(self, config_file: Path, logs: Sequence[Path], job: TrialJob, requests: Sequence[TrafficRequest],
            on_progress: OnProgress, on_checkpoint: OnCheckpoint, timeout_s: float,
            interrupts: Interrupts) -> TrialOutcome:
        """Start the servers, measure them on `requests` as `job.plan` says, stop them; never raises for what a
        server does (raises Interrupted after a signal)."""
        done = threading.Event()
        threading.Thread(target=self._stop_on_signal, args=(interrupts, done), daemon=True).start()
        try:
            start_s = self.start(config_file, logs)
            http = HttpExecutor(self.urls, gone=self.crashed)
            outcome = http.run(job, requests, on_progress, on_checkpoint, timeout_s - start_s)
        except ServerStartError as e:
            interrupts.check()  # stopped by a signal, not by the server
            return TrialOutcome(TrialStatus.error, reason=str(e))
        finally:
            done.set()
            self.stop()
        interrupts.check()
        return dataclasses.replace(outcome, setup_s=start_s)

    def _stop_on_signal(self, interrupts: Interrupts, done: threading.Event) -> None:
        """A signal stops the servers within half a second: their replays then end at once, and `run` raises."""
        while not done.wait(SIGNAL_POLL_S):
            if interrupts.requested:
                self.stop()
                return
