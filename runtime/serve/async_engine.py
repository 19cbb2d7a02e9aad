"""The engine behind the server: one thread steps it; each request reads its outputs from its own asyncio queue.

    event loop (HTTP handlers)                      engine thread
    submit(id, prompt, params) --_Add-->            commands applied between steps
    abort(id)                  --_Abort-->          engine.abort(id): its blocks freed at once
    outputs(id, queue) <--call_soon_threadsafe--    engine.step() -> RequestOutput per request per step
      (left early: abort)

Only the engine thread touches the engine (the checks in `reject_reason` read its config alone). Outputs
are CUMULATIVE: one per step that adds a token, so a stream sends a token as soon as it is sampled; a
consumer that falls behind (the event loop busier than the engine) gets the latest output only, which
holds every token of the ones it skipped (vLLM's output collector merges the same way). A step's outputs
cross to the event loop in one hand-over.
Overload is answered at the door: with `max_pending` requests in flight (running or waiting in the
engine), `submit` raises `Overloaded` and the server answers 503; the engine's own waiting queue is
thereby bounded. An exception in the engine thread fails every open request and marks the engine dead
(`/health` then answers 503).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import NamedTuple

from runtime.engine import LLMEngine
from runtime.outputs import RequestOutput
from runtime.sampling_params import RequestOutputKind, SamplingParams

__all__ = ["AsyncEngine", "EngineDead", "Overloaded"]

IDLE_WAIT_S = 0.05  # how long an idle engine thread blocks on its command queue before checking for stop


class Overloaded(RuntimeError):
    """`max_pending` requests are in flight: the server answers 503."""


class EngineDead(RuntimeError):
    """The engine thread raised; the message carries its error."""


OnFinished = Callable[[RequestOutput], None]  # called in the engine thread for every finished request


class _Add(NamedTuple):
    request_id: str
    prompt: list[int]
    params: SamplingParams


class _Abort(NamedTuple):
    request_id: str


class AsyncEngine:
    def __init__(self, engine: LLMEngine, max_pending: int, on_finished: OnFinished = lambda out: None) -> None:
        if max_pending < 1:
            raise ValueError(f"max_pending must be >= 1, got {max_pending}")
        self.engine = engine
        self.max_pending = max_pending
        self.on_finished = on_finished
        self.error: BaseException | None = None
        self._commands: queue.SimpleQueue[_Add | _Abort] = queue.SimpleQueue()
        self._streams: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self._lock = threading.Lock()  # guards _streams: written by the loop, read by the engine thread
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pagetune-engine", daemon=True)

    # ---- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    @property
    def in_flight(self) -> int:
        return len(self._streams)

    # ---- the event loop's side -----------------------------------------------------------------
    def submit(self, request_id: str, prompt: list[int], params: SamplingParams) -> asyncio.Queue:
        """Queue a request (already checked with `engine.reject_reason`); its outputs arrive on the queue."""
        if self.error is not None:
            raise EngineDead(f"the engine stopped: {self.error!r}")
        q: asyncio.Queue = asyncio.Queue()
        with self._lock:
            if len(self._streams) >= self.max_pending:
                raise Overloaded(f"{len(self._streams)} requests in flight, the server's limit (--max-pending)")
            self._streams[request_id] = (asyncio.get_running_loop(), q)
        self._commands.put(_Add(request_id, prompt, replace(params, output_kind=RequestOutputKind.CUMULATIVE)))
        return q

    def abort(self, request_id: str) -> None:
        """Stop a request (its client left): no more outputs, its blocks freed before the next step."""
        with self._lock:
            self._streams.pop(request_id, None)
        self._commands.put(_Abort(request_id))

    async def outputs(self, request_id: str, q: asyncio.Queue) -> AsyncIterator[RequestOutput]:
        """A submitted request's outputs, one per step, the last one finished. Left early (the consumer
        stops iterating or is cancelled, as when its client disconnects), the request is aborted."""
        finished = False
        try:
            while not finished:
                out = await q.get()
                while not q.empty() and not isinstance(out, BaseException):  # the consumer fell behind:
                    out = q.get_nowait()  # the latest CUMULATIVE output holds every token of the skipped ones
                if isinstance(out, BaseException):
                    raise EngineDead(f"the engine stopped: {out!r}")
                finished = out.finished
                yield out
        finally:
            if not finished:
                self.abort(request_id)

    # ---- the engine thread ---------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._apply_commands(block=not self.engine.has_unfinished_requests())
                if self.engine.has_unfinished_requests():
                    self._deliver(self.engine.step())
        except BaseException as e:  # the server stays up to say so (/health), every open request fails
            self.error = e
            self._fail_all(e)

    def _apply_commands(self, block: bool) -> None:
        try:
            command = self._commands.get(timeout=IDLE_WAIT_S) if block else self._commands.get_nowait()
        except queue.Empty:
            return
        while True:
            if isinstance(command, _Add):
                self.engine.add_request(*command)
            else:
                self.engine.abort(command.request_id)
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return

    def _deliver(self, outputs: list[RequestOutput]) -> None:
        """A step's outputs to their queues: one hand-over per event loop, not one per output."""
        batches: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Queue, object]]] = {}
        with self._lock:
            targets = [self._streams.pop(out.request_id, None) if out.finished else self._streams.get(out.request_id)
                       for out in outputs]
        for out, target in zip(outputs, targets):
            if out.finished and out.outputs[0].finish_reason != "abort":
                self.on_finished(out)
            if target is not None:  # None: aborted, its client is gone
                batches.setdefault(target[0], []).append((target[1], out))
        for loop, items in batches.items():
            _hand_over(loop, items)

    def _fail_all(self, error: BaseException) -> None:
        with self._lock:
            streams, self._streams = self._streams, {}
        for loop, q in streams.values():
            _hand_over(loop, [(q, error)])


def _hand_over(loop: asyncio.AbstractEventLoop, items: list[tuple[asyncio.Queue, object]]) -> None:
    with contextlib.suppress(RuntimeError):  # the loop closed (the server is shutting down): nobody reads it
        loop.call_soon_threadsafe(_put_all, items)


def _put_all(items: list[tuple[asyncio.Queue, object]]) -> None:
    for q, item in items:
        q.put_nowait(item)
