"""`--engine-mode process` (the default): the engine in a child process, beside the HTTP server's process.

    server process                                          engine process (spawned: CUDA cannot fork)
    event loop --send--> queue --> sender thread ==pipe==>  commands applied between steps (EngineCore)
    sink.deliver(StepOutputs) <-- reader thread <==pipe===  one StepOutputs per step, pickled

Each process has its own interpreter lock, as vLLM V1's engine core does: the server's Python work (HTTP,
JSON, one SSE chunk per token per request, detokenizing) no longer stretches the engine's steps. The
engine process loads the weights and is the only one to touch the device; the server's process holds
the config, the tokenizer and the `RequestLimits` the child reports once it is ready.

Startup: building an `EngineProcess` waits for the child's first message, `_Ready` (its limits)
or `_StartupFailed`: a `ConfigError` in the child (memory, model, config) is raised here as a
`ConfigError` with the same message, anything else as an `EngineStartError`. Shutdown: `close()`
closes the command pipe; the child sees the end of it between two steps and exits (so it does if the
server's process dies). The child ignores SIGINT: the server's process decides when it stops. A child
that raises sends `_Failed` first; one that dies without a word is seen as the end of its output pipe.
Either way the sink is failed with the reason (/health answers 503 with it).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import signal
import threading
import traceback
from multiprocessing.connection import Connection
from typing import NamedTuple

from runtime.config import ConfigError, EngineConfig
from runtime.engine import RequestLimits
from runtime.serve.engine_core import Command, EngineCore, OutputSink

__all__ = ["EngineProcess", "EngineStartError"]

STOP_WAIT_S = 30.0  # how long close() waits for the child to finish its step and exit before killing it


class EngineStartError(RuntimeError):
    """The engine process failed to start for a reason other than the config (its traceback is on stderr)."""


class _Ready(NamedTuple):
    limits: RequestLimits


class _StartupFailed(NamedTuple):
    error: str
    config_error: bool  # a ConfigError (memory, model, config): the message alone says it all


class _Failed(NamedTuple):
    error: str  # repr of what the engine raised


class EngineProcess:
    """An `EngineHandle`: the engine for `config` loaded in a spawned child process (blocks until it is)."""

    def __init__(self, config: EngineConfig) -> None:
        ctx = multiprocessing.get_context("spawn")
        child_commands, self._commands = ctx.Pipe(duplex=False)
        self._outputs, child_outputs = ctx.Pipe(duplex=False)
        # Not daemonic when it starts tensor-parallel ranks (a daemonic process may not have children); close()
        # and the end of the command pipe stop it either way.
        self.process = ctx.Process(target=_child_main, args=(config, child_commands, child_outputs),
                                   name="pagetune-engine", daemon=config.tensor_parallel_size == 1)
        self.process.start()
        child_commands.close()  # only the child holds these ends now: each side sees EOF when the other goes
        child_outputs.close()
        self._queue: queue.SimpleQueue[Command | None] = queue.SimpleQueue()  # None: close the pipe
        self._sender: threading.Thread | None = None
        self._reader: threading.Thread | None = None
        self._closed = False
        try:
            self._limits = self._await_ready()
        except (ConfigError, EngineStartError):  # the child said why, and exits
            self.close()
            raise
        except BaseException:  # interrupted while the child loads: it would finish loading first
            self.process.kill()
            self.close()
            raise

    @property
    def limits(self) -> RequestLimits:
        return self._limits

    def start(self, sink: OutputSink) -> None:
        self._sender = threading.Thread(target=self._send_loop, name="pagetune-engine-send", daemon=True)
        self._reader = threading.Thread(target=self._read_loop, args=(sink,), name="pagetune-engine-read", daemon=True)
        self._sender.start()
        self._reader.start()

    def send(self, command: Command) -> None:
        self._queue.put(command)

    def close(self) -> None:
        """Stop the child (it finishes its step) and the threads; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        if self._sender is not None:
            self._sender.join(timeout=STOP_WAIT_S)
        self._commands.close()
        self.process.join(timeout=STOP_WAIT_S)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=STOP_WAIT_S)
        if self._reader is not None:
            self._reader.join(timeout=STOP_WAIT_S)
        self._outputs.close()

    # ---- the server process's threads ----------------------------------------------------------
    def _await_ready(self) -> RequestLimits:
        try:
            message = self._outputs.recv()
        except EOFError:
            raise EngineStartError(f"the engine process {self._exit_status()} while loading") from None
        if isinstance(message, _StartupFailed):
            raise (ConfigError if message.config_error else EngineStartError)(message.error)
        assert isinstance(message, _Ready), message
        return message.limits

    def _send_loop(self) -> None:
        """Commands to the child, batched: everything queued since the last send goes in one message."""
        while True:
            batch = [self._queue.get()]
            with contextlib.suppress(queue.Empty):
                while True:
                    batch.append(self._queue.get_nowait())
            commands = [c for c in batch if c is not None]
            if commands:
                try:
                    self._commands.send(commands)
                except OSError:  # the child is gone: the reader reports it
                    return
            if len(commands) < len(batch):
                return

    def _read_loop(self, sink: OutputSink) -> None:
        try:
            while True:
                message = self._outputs.recv()
                if isinstance(message, _Failed):
                    sink.fail(message.error)
                    return
                sink.deliver(message)
        except (EOFError, OSError):
            if not self._closed:
                sink.fail(f"the engine process {self._exit_status()}")

    def _exit_status(self) -> str:
        self.process.join(timeout=STOP_WAIT_S)
        code = self.process.exitcode
        if code is None:
            return "stopped answering"
        if code < 0:
            return f"was killed by {signal.Signals(-code).name}"
        return f"exited with code {code}"


# ---- the engine process ------------------------------------------------------------------------
def _child_main(config: EngineConfig, commands: Connection, outputs: Connection) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the server decides
    from runtime.engine import LLMEngine
    from runtime.heap import freeze_startup_heap
    from runtime.warmup import warm_up

    try:
        _leave_a_core(config)
        engine = LLMEngine(config)
        if engine.runner_on_gpu:
            warm_up(engine)  # before the server reports ready: the first requests compile nothing
        core = EngineCore(engine)
        freeze_startup_heap()  # this process serves this engine until it exits: no collection walks its heap
    except ConfigError as e:  # InsufficientMemoryError and ModelLoadError included
        outputs.send(_StartupFailed(str(e), config_error=True))
        return
    except BaseException as e:
        traceback.print_exc()
        outputs.send(_StartupFailed(repr(e), config_error=False))
        return
    outputs.send(_Ready(core.limits))
    try:
        _serve(core, commands, outputs)
    except BaseException as e:
        traceback.print_exc()
        with contextlib.suppress(OSError):
            outputs.send(_Failed(repr(e)))
        raise SystemExit(1) from None


def _leave_a_core(config: EngineConfig) -> None:
    """On CPU, at most one intra-op thread fewer than the cores: the server's process needs one (HTTP, JSON,
    detokenizing), and OpenMP threads that share cores with a busy process wait on each other at every
    barrier (a tiny model's steps ran 100x slower so on 2 cores). OMP_NUM_THREADS still lowers it."""
    import torch

    from runtime.placement import resolve_device

    if resolve_device(config.device).type == "cpu":
        torch.set_num_threads(max(1, min(torch.get_num_threads(), (os.cpu_count() or 1) - 1)))


def _serve(core: EngineCore, commands: Connection, outputs: Connection) -> None:
    """Apply commands, step while there is work, one message per step; return once the server closed."""
    while _apply_commands(core, commands, block=not core.busy):
        if core.busy:
            outputs.send(core.step())


def _apply_commands(core: EngineCore, commands: Connection, block: bool) -> bool:
    """Every command batch waiting (idle: wait for one); False once the server closed its end."""
    try:
        ready = commands.poll(None if block else 0)
        while ready:
            for command in commands.recv():
                core.apply(command)
            ready = commands.poll(0)
    except EOFError:
        return False
    return True
