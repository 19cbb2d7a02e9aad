"""The engine's side of the server, and what crosses to the HTTP side: one message per step.

    HTTP side (async_engine)                          engine side (EngineCore, in a thread or a child process)
    Add(id, prompt, params) / Abort(id)   -------->   applied between steps (an abort frees the blocks at once)
    StepOutputs                           <--------   step(): per reported request its NEW token ids since
                                                      its last report and its finish reason (a Delta's fields),
                                                      the finished requests' Timing (/metrics), the step's stats

Messages are NamedTuples of builtins: a child process receives and sends them pickled over a pipe
(`engine_process`), a thread passes them as they are (`engine_thread`). Deltas, not cumulative token
lists, so a message's size does not grow with a request's length. The engine never detokenizes for the
server: the HTTP side turns deltas into text with the model's tokenizer (`runtime.serve.streams`), off
the engine's interpreter when the engine runs in its own process.

`EngineHandle` is what both modes offer the HTTP side; `OutputSink` is what they deliver to.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, NamedTuple, Protocol

from runtime.engine import RequestLimits
from runtime.outputs import RequestOutput
from runtime.sampling_params import RequestOutputKind, SamplingParams
from runtime.stats import StepStats

if TYPE_CHECKING:
    from runtime.engine import LLMEngine

__all__ = ["Abort", "Add", "Command", "Delta", "EngineCore", "EngineHandle", "OutputSink", "StepOutputs", "Timing"]


class Add(NamedTuple):
    request_id: str
    prompt: list[int]
    params: SamplingParams


class Abort(NamedTuple):
    request_id: str


Command = Add | Abort


class Delta(NamedTuple):
    """One request's part of a step, as its asyncio queue holds it."""

    request_id: str
    token_ids: list[int]  # the tokens sampled since this request's last Delta (none for an abort)
    finish_reason: str | None  # "length" | "stop" | "abort" | "rejected"; None while it runs


class Timing(NamedTuple):
    """A finished request's engine-clock times and sizes: what `ServerMetrics.observe` reads."""

    prompt_tokens: int
    output_tokens: int
    arrival_time: float
    first_token_time: float | None  # None: it never produced a token
    finished_time: float | None

    @classmethod
    def of(cls, out: RequestOutput) -> Timing:
        m = out.metrics
        return cls(len(out.prompt_token_ids), sum(len(c.token_ids) for c in out.outputs), m.arrival_time,
                   m.first_token_time, m.finished_time)


class StepOutputs(NamedTuple):
    """One engine step, as the HTTP side needs it. Each request the step reported (a new token, or its end)
    has an entry in each of the three parallel lists, a `Delta`'s fields: lists of builtins cross the pipe
    (serialized by `Connection.send`) about ten times faster than a NamedTuple per request, and that
    serializing is on the engine process's critical path."""

    request_ids: list[str]
    token_ids: list[list[int]]
    finish_reasons: list[str | None]
    finished: list[Timing]  # requests that finished in the step, aborted ones left out
    stats: StepStats | None  # the engine's last_step: /metrics' running, waiting and KV gauges
    preempted: int  # the engine's totals.preempted since start
    busy: bool  # the engine still holds requests after the step

    def deltas(self) -> list[Delta]:
        return list(map(Delta, self.request_ids, self.token_ids, self.finish_reasons))


class EngineCore:
    """An `LLMEngine` as the server drives it: commands applied between steps, a step's outputs as deltas."""

    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self._sent: dict[str, int] = {}  # request id -> tokens already sent in its Deltas

    @property
    def busy(self) -> bool:
        return self.engine.has_unfinished_requests()

    @property
    def limits(self) -> RequestLimits:
        return self.engine.limits

    def apply(self, command: Command) -> None:
        if isinstance(command, Abort):
            self.engine.abort(command.request_id)
            return
        # every step reports the request (CUMULATIVE); text is made on the HTTP side, from the deltas
        params = replace(command.params, output_kind=RequestOutputKind.CUMULATIVE, detokenize=False)
        self.engine.add_request(command.request_id, command.prompt, params)

    def step(self) -> StepOutputs:
        ids, tokens, reasons, finished = [], [], [], []
        for out in self.engine.step():
            c = out.outputs[0]  # the server asks for one sample (n = 1)
            sent = self._sent.pop(out.request_id, 0) if out.finished else self._sent.get(out.request_id, 0)
            ids.append(out.request_id)
            tokens.append(c.token_ids[sent:])
            reasons.append(c.finish_reason)
            if not out.finished:
                self._sent[out.request_id] = len(c.token_ids)
            elif c.finish_reason != "abort":
                finished.append(Timing.of(out))
        engine = self.engine
        return StepOutputs(ids, tokens, reasons, finished, engine.last_step, engine.totals.preempted, self.busy)


class OutputSink(Protocol):
    """Where an engine handle delivers, from its own thread: the HTTP side's `AsyncEngine`."""

    def deliver(self, step: StepOutputs) -> None: ...

    def fail(self, error: str) -> None: ...  # the engine stopped for good; `error` says why


class EngineHandle(Protocol):
    """An engine ready to serve (weights loaded: a failure to load raised when the handle was built).

    Call order: `start(sink)` once, `send` any number of times, `close()` once (idempotent)."""

    @property
    def limits(self) -> RequestLimits: ...

    def start(self, sink: OutputSink) -> None: ...

    def send(self, command: Command) -> None: ...  # never blocks the caller (the event loop)

    def close(self) -> None: ...
