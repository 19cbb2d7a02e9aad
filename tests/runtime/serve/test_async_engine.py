"""`AsyncEngine` without HTTP: an engine thread that raises fails every open request and refuses new ones;
a consumer that falls behind gets the deltas queued meanwhile merged into one."""

from __future__ import annotations

import asyncio

import pytest

from runtime import SamplingParams
from runtime.outputs import TokenLogprob
from runtime.serve.async_engine import AsyncEngine, EngineDead, Overloaded
from runtime.serve.engine_core import Add, Delta
from runtime.serve.engine_thread import EngineThread


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
    runner = AsyncEngine(EngineThread(_BrokenEngine()), max_pending=4)
    runner.start()

    async def main():
        q = runner.submit("a", [1, 2], SamplingParams())
        with pytest.raises(EngineDead, match=r"the engine stopped: RuntimeError\('boom'\)"):
            [out async for out in runner.outputs("a", q)]
        with pytest.raises(EngineDead, match="boom"):
            runner.submit("b", [1], SamplingParams())

    asyncio.run(main())
    runner.stop()
    assert runner.error == "RuntimeError('boom')" and runner.in_flight == 0


class _Handle:
    """An engine handle that keeps what it is sent."""

    def __init__(self) -> None:
        self.sent: list = []

    def send(self, command) -> None:
        self.sent.append(command)


def test_max_pending_is_checked_before_anything_reaches_the_engine():
    handle = _Handle()
    runner = AsyncEngine(handle, max_pending=1)

    async def main():
        runner.submit("a", [1], SamplingParams())
        with pytest.raises(Overloaded, match=r"^1 requests in flight, the server's limit \(--max-pending\)$"):
            runner.submit("b", [1], SamplingParams())

    asyncio.run(main())
    assert (runner.in_flight, handle.sent) == (1, [Add("a", [1], SamplingParams())])


def test_a_consumer_that_falls_behind_gets_the_deltas_merged():
    runner = AsyncEngine(_Handle(), max_pending=1)

    async def main():
        q = asyncio.Queue()
        for ids in ([1], [2, 3], [4]):
            q.put_nowait(Delta("x", ids, None))
        outs = runner.outputs("x", q)
        first = await outs.__anext__()
        q.put_nowait(Delta("x", [5], None))
        q.put_nowait(Delta("x", [6], "length", done=True))
        return [first, *[d async for d in outs]]

    assert asyncio.run(main()) == [Delta("x", [1, 2, 3, 4], None), Delta("x", [5, 6], "length", done=True)]


def test_merged_deltas_stay_one_per_sample_and_the_last_stays_last():
    """n = 2: a consumer behind by three steps gets one Delta per sample, logprobs joined, `done` last."""
    runner = AsyncEngine(_Handle(), max_pending=1)
    lp = [TokenLogprob(t, -float(t), (t,), (-float(t),)) for t in range(6)]

    async def main():
        q = asyncio.Queue()
        for delta in (Delta("x", [0], None, 0, lp[:1]), Delta("x", [1], None, 1, lp[1:2]),
                      Delta("x", [2], "stop", 1, lp[2:3]), Delta("x", [3, 4], "length", 0, lp[3:5], done=True)):
            q.put_nowait(delta)
        return [d async for d in runner.outputs("x", q)]

    assert asyncio.run(main()) == [Delta("x", [1, 2], "stop", 1, lp[1:3]),
                                   Delta("x", [0, 3, 4], "length", 0, [lp[0], *lp[3:5]], done=True)]
