"""A pagetune server on 127.0.0.1 in a thread of the test process (uvicorn on a free port), and its clients."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import uvicorn

from runtime import EngineConfig, LLMEngine
from runtime.model.tokenizer import load_tokenizer
from runtime.serve.app import build_app
from runtime.serve.async_engine import AsyncEngine


class Served(NamedTuple):
    base_url: str  # http://127.0.0.1:PORT/v1
    engine: LLMEngine  # stepped by the server's thread: read it only once the server is idle
    engine_runner: AsyncEngine  # the server's AsyncEngine


def server_config(model: str = "tiny", **knobs: Any) -> EngineConfig:
    """A CPU engine that checks its block bookkeeping after every step (a failure stops it: /health says 503)."""
    knobs = {"device": "cpu", "debug_integrity": True, "device_memory_gb": 0.05, **knobs}
    return EngineConfig.from_flat(model, **knobs)


@contextmanager
def running_server(config: EngineConfig, max_pending: int = 256, model: Any = None) -> Iterator[Served]:
    """`model`: weights already loaded for `config` (another engine's `.model`), to skip loading them again."""
    engine = LLMEngine(config, model=model, tokenizer=load_tokenizer(config.model.name))
    app = build_app(engine, max_pending)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True, name="uvicorn")
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield Served(f"http://127.0.0.1:{port}/v1", engine, app.state.server.runner)
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def wait_idle(engine: LLMEngine, timeout_s: float = 30.0) -> None:
    """Until the engine holds no request (an abort is applied by the engine thread, at its next turn)."""
    deadline = time.monotonic() + timeout_s
    while engine.has_unfinished_requests() or (engine.last_step and engine.last_step.kv_used_blocks):
        assert time.monotonic() < deadline, "the engine did not drain"
        time.sleep(0.02)
