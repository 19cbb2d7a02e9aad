"""A pagetune server on 127.0.0.1 in a thread of the test process (uvicorn on a free port), and its clients.

The engine runs as the server runs it: in a child process (`mode="process"`, the default), or on a thread
of the test process (`mode="thread"`, which can reuse weights already loaded here)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import uvicorn

from runtime import EngineConfig
from runtime.model.tokenizer import load_tokenizer
from runtime.serve.app import build_app
from runtime.serve.async_engine import AsyncEngine
from runtime.serve.cli import start_engine


class Served(NamedTuple):
    base_url: str  # http://127.0.0.1:PORT/v1
    runner: AsyncEngine  # the server's AsyncEngine: its handle is an EngineProcess or an EngineThread


def server_config(model: str = "tiny", **knobs: Any) -> EngineConfig:
    """A CPU engine that checks its block bookkeeping after every step (a failure stops it: /health says 503)."""
    knobs = {"device": "cpu", "debug_integrity": True, "device_memory_gb": 0.05, **knobs}
    return EngineConfig.from_flat(model, **knobs)


@contextmanager
def running_server(config: EngineConfig, max_pending: int = 256, mode: str = "process",
                   model: Any = None) -> Iterator[Served]:
    """`model`: weights already loaded for `config` (another engine's `.model`), to skip loading them again
    (mode "thread" only)."""
    handle = start_engine(config, mode, model)
    app = build_app(handle, config.model.name, load_tokenizer(config.model.name), max_pending)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True, name="uvicorn")
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield Served(f"http://127.0.0.1:{port}/v1", app.state.server.runner)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        handle.close()


def wait_idle(served: Served, timeout_s: float = 30.0) -> None:
    """Until the engine holds no request and no KV block, as its latest step said (an abort is applied by the
    engine between two steps, and a step follows it)."""
    runner, deadline = served.runner, time.monotonic() + timeout_s
    while runner.in_flight or runner.busy or (runner.last_step and runner.last_step.kv_used_blocks):
        assert time.monotonic() < deadline, "the engine did not drain"
        time.sleep(0.02)
