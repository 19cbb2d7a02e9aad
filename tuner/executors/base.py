"""The `Executor` protocol: what runs a study's trials. The search (`search.objective`), the conclusion
(`results`) and the executors themselves import this module, never one executor's (the worker's supervisor
starts processes; the simulator runs in-process; the HTTP executor measures a server).

Call order: `describe(config)` once (the device, before the first trial), then `run(job, ...)` per trial,
then `close()`. `run` never raises for what the trial does (a failure is its `TrialOutcome`); it raises
`Interrupted` on a signal and `WorkerStartError` when nothing can run a trial at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from runtime import EngineConfig
from tuner.measure.job import Hardware, TrialJob, TrialOutcome
from tuner.measure.measure import Checkpoint as OnCheckpoint
from tuner.measure.measure import Progress as OnProgress
from tuner.traffic import TrafficRequest

__all__ = ["Executor", "OnCheckpoint", "OnProgress", "WorkerStartError"]


class WorkerStartError(RuntimeError):
    """The worker process died before it could serve a trial (its own traceback is above, on stderr)."""


class Executor(Protocol):
    """Runs trials for the study: the worker process (`WorkerSupervisor`), the simulator (`SimExecutor`), a
    server (`HttpExecutor`, `VllmExecutor`), or a test double."""

    def describe(self, config: EngineConfig) -> Hardware: ...

    def run(self, job: TrialJob, requests: Sequence[TrafficRequest], on_progress: OnProgress,
            on_checkpoint: OnCheckpoint, timeout_s: float) -> TrialOutcome: ...

    def close(self) -> None: ...
