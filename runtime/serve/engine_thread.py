"""`--engine-mode thread`: the engine stepped by a thread of the server's own process.

    event loop --send(Add | Abort)--> queue --> engine thread: commands applied between steps,
                                                 EngineCore.step() -> sink.deliver(StepOutputs)

Simple, and the engine shares the server's interpreter lock with the HTTP side: under a heavy stream
load their Python work serializes and the engine's steps stretch (`engine_process` avoids that). Kept
to compare the two (experiments/bench_serve.py) and for tests that reuse loaded weights.
"""

from __future__ import annotations

import queue
import threading

from runtime.engine import LLMEngine, RequestLimits
from runtime.serve.engine_core import Command, EngineCore, OutputSink

__all__ = ["EngineThread"]

IDLE_WAIT_S = 0.05  # how long an idle engine thread blocks on its command queue before checking for stop


class EngineThread:
    """An `EngineHandle` over an engine already built in this process (`tokenizer=None` is enough: the
    HTTP side makes the text)."""

    def __init__(self, engine: LLMEngine) -> None:
        self.core = EngineCore(engine)
        self._commands: queue.SimpleQueue[Command] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def limits(self) -> RequestLimits:
        return self.core.limits

    def start(self, sink: OutputSink) -> None:
        self._thread = threading.Thread(target=self._run, args=(sink,), name="pagetune-engine", daemon=True)
        self._thread.start()

    def send(self, command: Command) -> None:
        self._commands.put(command)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self, sink: OutputSink) -> None:
        try:
            while not self._stop.is_set():
                self._apply_commands(block=not self.core.busy)
                if self.core.busy:
                    sink.deliver(self.core.step())
        except BaseException as e:  # the server stays up to say so (/health), every open request fails
            sink.fail(repr(e))

    def _apply_commands(self, block: bool) -> None:
        try:
            command = self._commands.get(timeout=IDLE_WAIT_S) if block else self._commands.get_nowait()
        except queue.Empty:
            return
        while True:
            self.core.apply(command)
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return
