"""Open-loop replay over HTTP: the window sent to an OpenAI-compatible server (pagetune's, vLLM, SGLang) at
its recorded arrival times, each request streamed, recorded as the in-process replay records it.

Each request is `POST {target}/completions` with its prompt as token ids, `max_tokens` its logged output
length, greedy, `ignore_eos` (vLLM's and SGLang's extra, pagetune's too), `stream` with
`stream_options.include_usage`. Its timeline, on a clock started with the replay:

    arrival      its scheduled send time (the window's arrival; a late client counts against the server,
                 as a late arrival would in production)
    token_times  each SSE chunk that carries text (one per token on pagetune's and vLLM's servers)
    first_token  the first of them; finished: the last event before [DONE]
    tokens       the usage's counts (`prompt_tokens`, `completion_tokens`, `prompt_tokens_details.cached_tokens`);
                 without usage, the chunks and the prompt's length

Over several servers (a deployment's replicas, `tuner.executors.replicas`) each request goes, when it is sent, to
the server with the fewest of the replay's requests in flight, the lowest index of equals: the simulated
balancer's rule (`tuner.deployment.LeastOutstanding`). A request is in flight from its send until its stream
ends, or fails.

An answer other than 200, or a connection that fails, is a rejected request with the server's message.
Idle gaps are skipped as in-process: while none of the replay's requests is open the clock jumps to the
next arrival (the server is assumed to serve this replay alone), so a sparse window, or a capacity probe
at a low rate, costs its busy time only. It stops early, as the in-process replay does, once
`stop_after_misses` requests missed the SLO: the requests still open are cancelled (their streams
closed, which aborts them on a server that watches for it). The engine's own figures (KV use,
preemptions, memory) are not seen from outside: NaN, and 0 preemptions.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import Any

import httpx2

from tuner.config import SloConfig
from tuner.deployment.least_outstanding import LeastOutstanding
from tuner.measure.replay import ReplayClock, is_miss, replay_result
from tuner.measure.timeline import ReplayResult, RequestRecord
from tuner.traffic import TrafficRequest

__all__ = ["http_replay", "served_model"]

Progress = Callable[[int], None]  # requests finished so far
CONNECT_TIMEOUT_S = 10.0


def served_model(target: str) -> str:
    """The first model `GET {target}/models` lists: what the replay's requests name."""
    response = httpx2.get(f"{target}/models", timeout=CONNECT_TIMEOUT_S)
    response.raise_for_status()
    return response.json()["data"][0]["id"]


def http_replay(target: str | Sequence[str], model: str, requests: Sequence[TrafficRequest], *,
                slo: SloConfig | None = None, stop_after_misses: int | None = None,
                progress: Progress | None = None) -> ReplayResult:
    """Replay `requests` (first arrival at 0.0) against `target` (`http://HOST:PORT/v1`), or against several such
    servers behind the least-outstanding-requests dispatcher."""
    targets = (target,) if isinstance(target, str) else tuple(target)
    return asyncio.run(_Replay(targets, model, slo, stop_after_misses, progress).run(requests))


class _Replay:
    def __init__(self, targets: tuple[str, ...], model: str, slo: SloConfig | None, stop_after: int | None,
                 progress: Progress | None) -> None:
        self.targets, self.model, self.slo, self.stop_after, self.progress = targets, model, slo, stop_after, progress
        self.dispatcher = LeastOutstanding(len(targets))
        self.records: list[RequestRecord] = []
        self.misses = 0
        self.stop = asyncio.Event()  # the verdict is certain: send nothing more, close what is open
        self.idle = asyncio.Event()  # no request open: the server has nothing of ours to do
        self.open = 0
        self.clock = ReplayClock()  # idle gaps skipped, as the in-process replay does

    async def run(self, requests: Sequence[TrafficRequest]) -> ReplayResult:
        limits = httpx2.Limits(max_connections=None, max_keepalive_connections=None)
        timeout = httpx2.Timeout(None, connect=CONNECT_TIMEOUT_S)
        async with httpx2.AsyncClient(limits=limits, timeout=timeout) as client:
            self.clock.restart()
            tasks = await self._dispatch(client, sorted(requests, key=lambda r: r.arrival_s))
            stopped = asyncio.ensure_future(self.stop.wait())
            still_open = set(tasks)
            while still_open and not self.stop.is_set():
                await asyncio.wait(still_open | {stopped}, return_when=asyncio.FIRST_COMPLETED)
                still_open = {t for t in still_open if not t.done()}
            for task in [*still_open, stopped]:  # a stop: the open streams are closed
                task.cancel()
            await asyncio.gather(*tasks, stopped, return_exceptions=True)
        return self._result(len(requests))

    async def _dispatch(self, client: httpx2.AsyncClient, requests: list[TrafficRequest]) -> list[asyncio.Task]:
        """Each request sent at its arrival time, whatever is still open (open loop); none after a stop."""
        tasks = []
        for req in requests:
            await self._until(req.arrival_s)
            if self.stop.is_set():
                break
            self.open += 1
            self.idle.clear()
            replica = self.dispatcher.pick()
            self.dispatcher.add(replica)
            tasks.append(asyncio.ensure_future(self._one(client, req, replica)))
        return tasks

    async def _until(self, arrival_s: float) -> None:
        """Wait for `arrival_s` on the replay clock; once no request is open, jump to it instead."""
        while not self.stop.is_set() and (delay := arrival_s - self.clock()) > 0:
            if self.open == 0:
                self.clock.jump_to(arrival_s)
                return
            waits = [asyncio.ensure_future(self.stop.wait()), asyncio.ensure_future(self.idle.wait())]
            await asyncio.wait(waits, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
            for w in waits:
                w.cancel()

    async def _one(self, client: httpx2.AsyncClient, req: TrafficRequest, replica: int) -> None:
        try:
            record = await _send(client, self.targets[replica], self.model, req, self.clock)
        finally:
            self.dispatcher.done(replica)
            self.open -= 1
            if self.open == 0:
                self.idle.set()
        self.records.append(record)
        self.misses += is_miss(record, self.slo)
        if self.stop_after is not None and self.misses >= self.stop_after:
            self.stop.set()
        if self.progress is not None:
            self.progress(len(self.records))

    def _result(self, requests: int) -> ReplayResult:
        return replay_result(self.records, requests, self.clock, self.stop.is_set())  # KV: out of sight


def _body(model: str, req: TrafficRequest) -> dict[str, Any]:
    return {"model": model, "prompt": list(req.prompt_token_ids), "max_tokens": req.output_tokens,
            "temperature": 0.0, "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}


async def _send(client: httpx2.AsyncClient, target: str, model: str, req: TrafficRequest,
                clock: Callable[[], float]) -> RequestRecord:
    times: list[float] = []
    usage: dict[str, Any] = {}
    try:
        async with client.stream("POST", f"{target}/completions", json=_body(model, req)) as response:
            if response.status_code != 200:
                return _rejected(req, clock(), f"HTTP {response.status_code}: {_message(await response.aread())}")
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                usage = chunk.get("usage") or usage
                if any(c.get("text") for c in chunk.get("choices", ())):
                    times.append(clock())
    except httpx2.HTTPError as e:
        return _rejected(req, clock(), f"{type(e).__name__}: {e}")
    return _record(req, times, usage, clock())


def _record(req: TrafficRequest, times: list[float], usage: dict[str, Any], end: float) -> RequestRecord:
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return RequestRecord(
        request_id=req.request_id, arrival=req.arrival_s, first_scheduled=None,
        first_token=times[0] if times else None, finished=end, token_times=tuple(times),
        prompt_tokens=usage.get("prompt_tokens", req.prompt_tokens),
        output_tokens=usage.get("completion_tokens", len(times)), cached_tokens=cached, preemptions=0,
        rejected_reason=None if times else "no tokens streamed")


def _rejected(req: TrafficRequest, end: float, reason: str) -> RequestRecord:
    return RequestRecord(req.request_id, req.arrival_s, None, None, end, (), req.prompt_tokens, 0, 0, 0, reason)


def _message(body: bytes) -> str:
    """The server's error message (OpenAI's shape), or the start of its body."""
    try:
        return str(json.loads(body)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return body[:200].decode("utf-8", "replace")
