"""The engine's side of the server, and what crosses to the HTTP side: one message per step.

    HTTP side (async_engine)                          engine side (EngineCore, in a thread or a child process)
    Add(id, prompt, params) / Abort(id)   -------->   applied between steps (an abort frees the blocks at once)
    StepOutputs                           <--------   step(): per reported sample its NEW token ids (and
                                                      logprobs) since its last report and its finish reason (a
                                                      Delta's fields), the finished requests' Timing (/metrics),
                                                      the step's stats

Messages are NamedTuples of builtins: a child process receives and sends them pickled over a pipe
(`engine_process`), a thread passes them as they are (`engine_thread`). Deltas, not cumulative token
lists, so a message's size does not grow with a request's length. The engine never detokenizes for the
server: the HTTP side turns deltas into text with the model's tokenizer (`runtime.serve.streams`), off
the engine's interpreter when the engine runs in its own process; so it matches stop strings too (as
vLLM v1's output processor does) and aborts a sample whose text stopped (`Abort` with `index`, reason
"stop"). A request with `n` > 1 reports one entry per sample.

`EngineHandle` is what both modes offer the HTTP side; `OutputSink` is what they deliver to.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, NamedTuple, Protocol

from runtime.engine import RequestLimits
from runtime.outputs import RequestOutput, TokenLogprob
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
    index: int | None = None  # one sample (a stop string ended its text); None: the whole request
    reason: str = "abort"  # the finish reason the engine reports: "stop" when a stop string ended it


Command = Add | Abort


class Delta(NamedTuple):
    """One sample's part of a step, as its request's asyncio queue holds it."""

    request_id: str
    token_ids: list[int]  # the tokens sampled since this sample's last Delta (none for an abort)
    finish_reason: str | None  # the sample's: "length" | "stop" | "abort" | "rejected"; None while it runs
    index: int = 0  # the sample (n > 1)
    logprobs: list[TokenLogprob] | None = None  # one per token id, where the request asked
    done: bool = False  # the request's last Delta: every sample has finished


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
    """One engine step, as the HTTP side needs it. Each sample the step reported (a new token, or its end)
    has an entry in each of the six parallel lists, a `Delta`'s fields: lists of builtins cross the pipe
    (serialized by `Connection.send`) about ten times faster than a NamedTuple per request, and that
    serializing is on the engine process's critical path."""

    request_ids: list[str]
    token_ids: list[list[int]]
    finish_reasons: list[str | None]
    indices: list[int]
    logprobs: list[list[TokenLogprob] | None]
    done: list[bool]
    finished: list[Timing]  # requests that finished in the step, aborted ones left out
    stats: StepStats | None  # the engine's last_step: /metrics' running, waiting and KV gauges
    preempted: int  # the engine's totals.preempted since start
    busy: bool  # the engine still holds requests after the step

    def deltas(self) -> list[Delta]:
        return list(map(Delta, self.request_ids, self.token_ids, self.finish_reasons, self.indices, self.logprobs,
                        self.done))


class EngineCore:
    """An `LLMEngine` as the server drives it: commands applied between steps, a step's outputs as deltas."""

    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self._sent: dict[str, int] = {}  # request id (n = 1) -> tokens already sent in its Deltas
        self._sent_samples: dict[str, list[int]] = {}  # request id (n > 1) -> per sample, the same (-1: its end)

    @property
    def busy(self) -> bool:
        return self.engine.has_unfinished_requests()

    @property
    def limits(self) -> RequestLimits:
        return self.engine.limits

    def apply(self, command: Command) -> None:
        if isinstance(command, Abort):
            self.engine.abort(command.request_id, command.index, command.reason)
            return
        # every step reports the request (CUMULATIVE); text is made on the HTTP side, from the deltas, and
        # stop strings are matched there
        params = replace(command.params, output_kind=RequestOutputKind.CUMULATIVE, detokenize=False, stop=None)
        self.engine.add_request(command.request_id, command.prompt, params)

    def step(self) -> StepOutputs:
        reported = self.engine.step()
        engine = self.engine
        out = StepOutputs([], [], [], [], [], [], [], engine.last_step, engine.totals.preempted, self.busy)
        ids, tokens, reasons, indices, logprobs, done = out[:6]
        for request in reported:
            if len(request.outputs) > 1:  # n > 1, forked (an n > 1 request reports its n samples from its first)
                self._report_samples(request, out)
                continue
            # n = 1 inline: this loop runs per request per step on the engine process's critical path
            rid, c, finished = request.request_id, request.outputs[0], request.finished
            sent = self._sent.pop(rid, 0) if finished else self._sent.get(rid, 0)
            ids.append(rid)
            tokens.append(c.token_ids[sent:])
            reasons.append(c.finish_reason)
            indices.append(0)
            logprobs.append(None if c.logprobs is None else c.logprobs[sent:])
            done.append(finished)
            if not finished:
                self._sent[rid] = len(c.token_ids)
            elif c.finish_reason != "abort":
                out.finished.append(Timing.of(request))
        return out

    def _report_samples(self, request: RequestOutput, out: StepOutputs) -> None:
        """Append an entry per sample with new tokens or a new end; the request's last one says `done`."""
        rid, first = request.request_id, len(out.request_ids)
        sent = self._sent_samples.pop(rid, [])
        sent += [0] * (len(request.outputs) - len(sent))  # n > 1: the samples forked after the first report
        for c in request.outputs:
            k = sent[c.index]
            if k < 0 or (k == len(c.token_ids) and c.finish_reason is None):
                continue  # its end went already, or nothing new
            out.request_ids.append(rid)
            out.token_ids.append(c.token_ids[k:])
            out.finish_reasons.append(c.finish_reason)
            out.indices.append(c.index)
            out.logprobs.append(None if c.logprobs is None else c.logprobs[k:])
            out.done.append(False)
            sent[c.index] = -1 if c.finish_reason is not None else len(c.token_ids)
        if not request.finished:
            self._sent_samples[rid] = sent
            return
        if len(out.request_ids) == first:  # every sample's end went already: the request's end still must
            for lst, value in zip(out[:6], (rid, [], request.outputs[0].finish_reason, 0, None, False)):
                lst.append(value)
        out.done[-1] = True
        if request.outputs[0].finish_reason != "abort":
            out.finished.append(Timing.of(request))


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
