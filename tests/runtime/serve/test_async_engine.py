"""`AsyncEngine` without HTTP: an engine thread that raises fails every open request and refuses new ones."""

from __future__ import annotations

import asyncio

import pytest

from runtime import SamplingParams
from runtime.serve.async_engine import AsyncEngine, EngineDead, Overloaded


class _BrokenEngine:
    """Accepts a request, then raises on its first step (as a CUDA error would)."""

    def __init__(self) -> None:
        self.added: list[str] = []

    def has_unfinished_requests(self) -> bool:
        return bool(self.added)

    def add_request(self, request_id, prompt, params) -> None:
        self.added.append(request_id)

    def step(self):
        raise RuntimeError("boom")


def test_an_engine_error_fails_the_open_request_and_refuses_new_ones():
    runner = AsyncEngine(_BrokenEngine(), max_pending=4)
    runner.start()

    async def main():
        q = runner.submit("a", [1, 2], SamplingParams())
        with pytest.raises(EngineDead, match=r"the engine stopped: RuntimeError\('boom'\)"):
            [out async for out in runner.outputs("a", q)]
        with pytest.raises(EngineDead, match="boom"):
            runner.submit("b", [1], SamplingParams())

    asyncio.run(main())
    runner.stop()
    assert repr(runner.error) == "RuntimeError('boom')" and runner.in_flight == 0


def test_max_pending_is_checked_before_anything_reaches_the_engine():
    engine = _BrokenEngine()
    runner = AsyncEngine(engine, max_pending=1)  # not started: submissions wait in the command queue

    async def main():
        runner.submit("a", [1], SamplingParams())
        with pytest.raises(Overloaded, match=r"^1 requests in flight, the server's limit \(--max-pending\)$"):
            runner.submit("b", [1], SamplingParams())

    asyncio.run(main())
    assert (runner.in_flight, engine.added) == (1, [])
