"""The HTTP side of the engine: a queue per request, aborts, the in-flight bound (503), the engine's health.

    event loop (HTTP handlers)                        engine handle (engine_process, or engine_thread)
    submit(id, prompt, params) --Add-->  handle.send     applied between steps
    abort(id[, index])         --Abort-> handle.send     the engine frees the request's (or sample's) blocks at once
    outputs(id, queue) <--call_soon_threadsafe-- deliver(StepOutputs), from the handle's thread
      (left early: abort)

A request's outputs are `Delta`s: a sample's token ids new since its last one. One arrives per sample
per step that adds a token, so a stream sends a token as soon as it is sampled; a consumer that falls
behind (the event loop busier than the engine) gets the deltas queued meanwhile merged into one per
sample (vLLM's output collector merges the same way). A step's outputs cross to the event loop in one hand-over.
Overload is answered at the door: with `max_pending` requests in flight (running or waiting in the
engine), `submit` raises `Overloaded` and the server answers 503; the engine's own waiting queue is
thereby bounded. An engine that fails (it raised, or its process died) fails every open request and
marks the engine dead: `error` says why, and `/health` answers 503 with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable

from runtime.engine import RequestLimits
from runtime.sampling_params import SamplingParams
from runtime.serve.engine_core import Abort, Add, Delta, EngineHandle, StepOutputs, Timing
from runtime.stats import StepStats

__all__ = ["AsyncEngine", "EngineDead", "Overloaded"]


class Overloaded(RuntimeError):
    """`max_pending` requests are in flight: the server answers 503."""


class EngineDead(RuntimeError):
    """The engine failed; the message carries its error."""


OnFinished = Callable[[Timing], None]  # called in the handle's thread for every request that finished


class AsyncEngine:
    """The `OutputSink` of an `EngineHandle`, and what the routes call."""

    def __init__(self, handle: EngineHandle, max_pending: int, on_finished: OnFinished = lambda t: None) -> None:
        if max_pending < 1:
            raise ValueError(f"max_pending must be >= 1, got {max_pending}")
        self.handle = handle
        self.max_pending = max_pending
        self.on_finished = on_finished
        self.error: str | None = None  # why the engine stopped; None while it serves
        self.last_step: StepStats | None = None  # the engine's latest step, as its last message said
        self.preempted = 0  # sequences preempted since the engine started
        self.busy = False  # the engine held requests after its latest step
        self._streams: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self._lock = threading.Lock()  # guards _streams: written by the loop, read by the handle's thread

    @property
    def limits(self) -> RequestLimits:
        return self.handle.limits

    # ---- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        self.handle.start(self)

    def stop(self) -> None:
        self.handle.close()

    @property
    def in_flight(self) -> int:
        return len(self._streams)

    # ---- the event loop's side -----------------------------------------------------------------
    def submit(self, request_id: str, prompt: list[int], params: SamplingParams) -> asyncio.Queue:
        """Queue a request (already checked with `limits.reject_reason`); its deltas arrive on the queue."""
        if self.error is not None:
            raise EngineDead(f"the engine stopped: {self.error}")
        q: asyncio.Queue = asyncio.Queue()
        with self._lock:
            if len(self._streams) >= self.max_pending:
                raise Overloaded(f"{len(self._streams)} requests in flight, the server's limit (--max-pending)")
            self._streams[request_id] = (asyncio.get_running_loop(), q)
        self.handle.send(Add(request_id, prompt, params))
        return q

    def abort(self, request_id: str, index: int | None = None, reason: str = "abort") -> None:
        """Stop a request (its client left, or a stop string ended its text): no more outputs, its blocks freed
        before the next step. With `index`, only that sample: the request's other samples run on."""
        if index is None:
            with self._lock:
                if self._streams.pop(request_id, None) is None:
                    return  # it finished, or was aborted already
        self.handle.send(Abort(request_id, index, reason))

    async def outputs(self, request_id: str, q: asyncio.Queue) -> AsyncIterator[Delta]:
        """A submitted request's deltas, one per step (merged when the consumer fell behind), the last one
        with its finish reason. Left early (the consumer stops iterating or is cancelled, as when its client
        disconnects), the request is aborted."""
        finished = False
        try:
            while not finished:
                batch = [await q.get()]
                while not q.empty():  # the consumer fell behind
                    batch.append(q.get_nowait())
                for delta in _merged(batch):
                    finished = finished or delta.done
                    yield delta
        finally:
            if not finished:
                self.abort(request_id)

    # ---- the handle's thread (OutputSink) ------------------------------------------------------
    def deliver(self, step: StepOutputs) -> None:
        """A step's outputs to their queues: one hand-over per event loop, not one per output."""
        self.last_step, self.preempted, self.busy = step.stats, step.preempted, step.busy
        for timing in step.finished:
            self.on_finished(timing)
        with self._lock:
            targets = [self._streams.pop(rid, None) if done else self._streams.get(rid)
                       for rid, done in zip(step.request_ids, step.done)]
        batches: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Queue, object]]] = {}
        for delta, target in zip(step.deltas(), targets):
            if target is not None:  # None: aborted, its client is gone
                batches.setdefault(target[0], []).append((target[1], delta))
        for loop, items in batches.items():
            _hand_over(loop, items)

    def fail(self, error: str) -> None:
        self.error = error
        with self._lock:
            streams, self._streams = self._streams, {}
        for loop, q in streams.values():
            _hand_over(loop, [(q, EngineDead(f"the engine stopped: {error}"))])


def _merged(batch: list[Delta | BaseException]) -> list[Delta]:
    """One Delta per sample for the deltas queued meanwhile, in order of their samples' first; raises an error
    queued among them."""
    by_sample: dict[int, Delta] = {}
    for delta in batch:
        if isinstance(delta, BaseException):
            raise delta
        earlier = by_sample.get(delta.index)
        by_sample[delta.index] = delta if earlier is None else _merge(earlier, delta)
    return sorted(by_sample.values(), key=lambda d: d.done)  # the request's last Delta stays last


def _merge(earlier: Delta, later: Delta) -> Delta:
    logprobs = None if later.logprobs is None else (earlier.logprobs or []) + later.logprobs
    return later._replace(token_ids=earlier.token_ids + later.token_ids, logprobs=logprobs,
                          done=earlier.done or later.done)


def _hand_over(loop: asyncio.AbstractEventLoop, items: list[tuple[asyncio.Queue, object]]) -> None:
    with contextlib.suppress(RuntimeError):  # the loop closed (the server is shutting down): nobody reads it
        loop.call_soon_threadsafe(_put_all, items)


def _put_all(items: list[tuple[asyncio.Queue, object]]) -> None:
    for q, item in items:
        q.put_nowait(item)
