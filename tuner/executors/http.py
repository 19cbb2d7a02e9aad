"""The `Executor` for a deployed server (`replay.target`): trials measured over HTTP, in the parent process.

The server's config is the server's own: a job's `config` is not applied (nothing can be), only its
measurement plan. The measurement is `tuner.measure.measure`'s, its replays `tuner.measure.http_replay`'s,
so the metrics, the verdicts and the capacity search are the in-process ones. Several servers (a deployment's
replicas) are measured as one, behind the replay's least-outstanding-requests dispatcher. Torch-free: nothing of
the runtime is loaded.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence

import httpx2

from runtime import EngineConfig
from tuner.executors.base import OnCheckpoint, OnProgress, WorkerStartError
from tuner.measure.http_replay import http_replay, served_model
from tuner.measure.job import Hardware, TrialJob, TrialOutcome, TrialStatus
from tuner.measure.outcome import measured_outcome
from tuner.measure.window import measure_window
from tuner.redact import mask_url
from tuner.traffic import TrafficRequest

__all__ = ["HttpExecutor"]


class _Deadline(Exception):
    """The trial ran past its timeout (checked between replays)."""


class _Gone(Exception):
    """A server of the measurement is gone (checked between replays): its exit and last log lines."""


class HttpExecutor:
    def __init__(self, target: str | Sequence[str], gone: Callable[[], str | None] = lambda: None) -> None:
        """`target`: a server's base URL (`http://HOST:PORT/v1`), or the replicas' of one deployment. `gone`: why a
        server this process started has exited (None while all run): asked between replays and at the end."""
        logging.getLogger("httpx2").setLevel(logging.WARNING)  # not a line per request on the console
        self.targets = tuple(t.rstrip("/") for t in ((target,) if isinstance(target, str) else target))
        self.target = self.targets[0]
        self.gone = gone
        self._model: str | None = None

    @property
    def model(self) -> str:
        """The model the (first) server lists first (`GET /models`): what every request names."""
        if self._model is None:
            try:
                self._model = served_model(self.target)
            except (httpx2.HTTPError, ValueError, KeyError, IndexError) as e:
                raise WorkerStartError(f"replay.target {mask_url(self.target)}: GET /models failed "
                                       f"({type(e).__name__}: {e}); is the server up?") from None
        return self._model

    def describe(self, config: EngineConfig) -> Hardware:
        """The endpoint, as provenance records it: what it serves, and where."""
        where = mask_url(self.target)
        return Hardware("remote", self.model, None, f"{self.model} at {where}", f"OpenAI-compatible server {where}")

    def run(self, job: TrialJob, requests: Sequence[TrafficRequest], on_progress: OnProgress,
            on_checkpoint: OnCheckpoint, timeout_s: float) -> TrialOutcome:
        """Measure the server on `requests` as `job.plan` says; never raises for what the server does."""
        deadline = time.monotonic() + timeout_s

        def replay_fn(reqs, **kwargs):
            if time.monotonic() > deadline:
                raise _Deadline
            if (why := self.gone()) is not None:
                raise _Gone(why)
            return http_replay(self.targets, self.model, reqs, **kwargs)

        try:
            measurement, stopped_at = measure_window(replay_fn, requests, job.plan, on_progress, lambda: math.nan,
                                                     on_checkpoint)
        except _Deadline:
            return TrialOutcome(TrialStatus.timeout, reason=f"timed out after {timeout_s:g} s (tuner.trial_timeout_s)")
        except _Gone as e:
            return _died(str(e))
        except (httpx2.HTTPError, WorkerStartError) as e:
            return TrialOutcome(TrialStatus.error, reason=f"{type(e).__name__}: {e}")
        if (why := self.gone()) is not None:  # during the last replay: its figures are not the server's
            return _died(why)
        return measured_outcome(measurement, stopped_at, None, 0.0, False)

    def close(self) -> None:
        """Nothing is held between replays (each opens its own connections)."""


def _died(why: str) -> TrialOutcome:
    return TrialOutcome(TrialStatus.error, reason=f"died while measured: {why}")
