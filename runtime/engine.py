"""The engine loop: add_request / step / abort over scheduler, model runner and sampler.

`step()` is three moves: schedule, run, postprocess. It returns a `RequestOutput` for every request
that finished in the step and, for requests whose `output_kind` is CUMULATIVE (the default, as in
vLLM), for every step that added tokens. Timestamps come from the `clock` given at construction (the
tuner's replay gives one that skips idle gaps); a token's time is read once the step's device work
is done (its tokens are on the host). With a tokenizer, outputs carry text, decoded when an output is
built: each step for CUMULATIVE requests, once at the end for FINAL_ONLY ones. `reset()` empties the
engine for another run on the same weights and KV pool. With `scheduler.async_scheduling` a step is
`runtime.overlap`'s: the next step is launched before this one's tokens are read, so outputs (the same tokens)
come one step later.

What the steps run on is the engine's `Backend`: the model (`model_backend`, the default), or the
simulator's model-free runner on a virtual clock (`runtime.sim`), so both run this same loop, scheduler
and KV manager. This module imports no torch; the model backend does when it is built.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from collections.abc import Sequence as Seq
from typing import TYPE_CHECKING, Any, NamedTuple

from runtime.backend import Backend, model_backend
from runtime.config import EngineConfig
from runtime.identity_cache import IdentityCache
from runtime.kv.integrity import check_integrity
from runtime.kv.manager import KVCacheManager
from runtime.limits import async_scheduling_on
from runtime.outputs import CompletionOutput, RequestMetrics, RequestOutput, TokenLogprob
from runtime.overlap import OverlapStepper
from runtime.sampling_params import RequestOutputKind, SamplingParams
from runtime.scheduler import Scheduler, SchedulerOutput
from runtime.sequence import Request, SeqStatus, Sequence
from runtime.stats import StepStats, StepTotals

if TYPE_CHECKING:
    import torch

    from runtime.detokenizer import IncrementalDetokenizer
    from runtime.model.llama import LlamaForCausalLM
    from runtime.model.tokenizer import Tokenizer


class RequestLimits(NamedTuple):
    """What every request must fit, resolved when the engine is built. Reads no engine state: the server asks
    it before a request enters, in a process that may hold no engine (`runtime.serve.engine_process`)."""

    vocab_size: int
    max_model_len: int

    def reject_reason(self, prompt: Seq[int], params: SamplingParams) -> str | None:
        """Why a request can never fit (it is rejected), or None."""
        vocab = self.vocab_size
        if not prompt:
            return "empty prompt"
        low, high = token_range(prompt)
        if low < 0 or high >= vocab:
            return f"prompt token ids must be in [0, {vocab}), got range [{low}, {high}]"
        total = len(prompt) + params.max_tokens
        if total > self.max_model_len:
            return (f"prompt ({len(prompt)} tokens) + max_tokens ({params.max_tokens}) = {total} "
                    f"exceeds max_model_len {self.max_model_len}")
        return None


class LLMEngine:
    def __init__(self, config: EngineConfig, clock: Callable[[], float] = time.perf_counter,
                 model: LlamaForCausalLM | None = None, record_logprobs: bool = False,
                 tokenizer: Tokenizer | None = None, backend: Backend | None = None) -> None:
        """`model`: weights already loaded (same name, dtype, device) to reuse; `record_logprobs`: keep the
        full next-token log-distribution of every token sample 0 draws (`logprobs[request_id]`, [V] each),
        for numerics checks; `tokenizer`: the model's, to fill `CompletionOutput.text` (None: no text);
        `backend`: what the steps run on (None: `model_backend(config, model)`, the real model)."""
        self.config = config
        self.tokenizer = tokenizer
        self._detokenizers: dict[int, IncrementalDetokenizer] = {}  # by seq_id, while its request lives
        self.logprobs: dict[str, list[torch.Tensor]] | None = {} if record_logprobs else None
        self.clock = clock
        backend = backend or model_backend(config, model)
        self.placement = backend.placement
        self.model = None if backend.placement is None else backend.placement.model
        self.model_config = None if self.model is None else self.model.config
        self.vocab_size = backend.vocab_size
        self.max_model_len = backend.max_model_len
        self.limits = RequestLimits(self.vocab_size, self.max_model_len)  # what every request must fit
        self.kv = KVCacheManager(backend.tiers, config.cache.enable_prefix_caching, config.cache.watermark)
        # a simulator steps in sync
        overlap = backend.placement is not None and async_scheduling_on(config, backend.placement.device.type)
        self.scheduler = Scheduler(
            self.kv, max_num_seqs=config.scheduler.max_num_seqs,
            max_num_batched_tokens=backend.max_num_batched_tokens,
            chunked_prefill=config.scheduler.enable_chunked_prefill,
            preemption_mode=config.scheduler.preemption_mode, policy=config.scheduler.policy,
            eos_ids=backend.eos_ids, max_model_len=backend.max_model_len, async_scheduling=overlap)
        self.runner = backend.make_runner(self.kv)
        self.sampler = backend.sampler
        self.requests: dict[str, Request] = {}
        self._logprob_requests: set[str] = set()  # live requests whose params ask for logprobs
        self.last_step: StepStats | None = None  # the latest step's stats; no history is kept
        self.totals = StepTotals()
        self._pending: list[RequestOutput] = []  # rejections and aborts, reported by the next step()
        self._seq_ids = itertools.count()
        self._seeds = itertools.count(config.seed * 1_000_003)
        self._overlap = OverlapStepper(self) if overlap else None  # async scheduling's step, and its step in flight

    @property
    def overlapped(self) -> bool:
        """Whether steps run under async scheduling: each step's tokens reach the host during the next step."""
        return self._overlap is not None

    def reset(self) -> None:
        """Abort everything and forget it: an empty KV pool and prefix cache, fresh totals and seeds.

        Weights, KV tensors and captured graphs are kept, so a run after `reset()` behaves as on a new
        engine without allocating a second pool.
        """
        for request_id in list(self.requests):
            self.abort(request_id)
        self._pending = []
        self._detokenizers.clear()
        self._logprob_requests.clear()
        self.kv.reset()
        if self.logprobs is not None:
            self.logprobs = {}
        self.last_step, self.totals = None, StepTotals()
        self._seq_ids = itertools.count()
        self._seeds = itertools.count(self.config.seed * 1_000_003)

    @property
    def runner_on_gpu(self) -> bool:
        """Whether the steps run a model on a CUDA device (where a warm-up compiles kernels: `runtime.warmup`)."""
        return self.placement is not None and self.placement.device.type == "cuda"

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests) or bool(self._pending)

    # ---- requests ------------------------------------------------------------------------------
    def add_request(self, request_id: str, prompt_token_ids: Seq[int], params: SamplingParams | None = None,
                    arrival_time: float | None = None, priority: int = 0) -> None:
        """Queue a request (or report its rejection at the next step). A tuple prompt's token range is checked
        once per distinct tuple (`token_range`): a replay adds the same prompts again and again."""
        if request_id in self.requests:
            raise ValueError(f"request id {request_id!r} is already in the engine")
        params = params or SamplingParams()
        if params.stop and self.tokenizer is None:
            raise ValueError(f"stop strings {params.stop!r} need the model's tokenizer, and this engine has none")
        arrival = self.clock() if arrival_time is None else arrival_time
        req = Request(request_id, list(prompt_token_ids), params, arrival, priority, RequestMetrics(arrival),
                      prompt=prompt_token_ids if isinstance(prompt_token_ids, tuple) else None)
        req.rejected_reason = self.reject_reason(prompt_token_ids, params)
        if req.rejected_reason is not None:
            req.metrics.finished_time = self.clock()
            self._pending.append(self._output(req))
            return
        seed = params.seed if params.seed is not None else next(self._seeds)
        tier = self.kv.tier_for(len(req.prompt_token_ids) + params.max_tokens)
        assert tier is not None  # the last tier covers max_model_len, checked above
        seq = Sequence(next(self._seq_ids), req, 0, list(req.prompt_token_ids), tier, seed)
        req.seqs.append(seq)
        self.requests[request_id] = req
        if params.logprobs is not None:
            self._logprob_requests.add(request_id)
        self.scheduler.add(seq)

    def reject_reason(self, prompt: Seq[int], params: SamplingParams) -> str | None:
        """Why `add_request` would reject this request (it can never fit), or None: `RequestLimits.reject_reason`."""
        return self.limits.reject_reason(prompt, params)

    def abort(self, request_id: str, index: int | None = None, reason: str = "abort") -> None:
        """Stop a request, or only its sample `index`, with finish reason `reason` (the server says "stop" when
        a stop string ended a sample's text): the blocks are freed now; the request's output comes at the next
        step once none of its samples runs."""
        if request_id not in self.requests:
            return
        if self._overlap is not None:  # the step in flight first: its tokens are reported as without async
            self._pending += self._overlap.drain()
        req = self.requests.get(request_id)
        if req is None:  # it finished in that step
            return
        for seq in req.seqs:
            if seq.status is not SeqStatus.FINISHED and index in (None, seq.index):
                seq.finish_reason = reason
                self._retire(seq)
        if not req.finished:
            return
        del self.requests[request_id]
        self._logprob_requests.discard(request_id)
        req.metrics.finished_time = self.clock()
        self._pending.append(self._output(req))

    # ---- the loop ------------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        if self._overlap is not None:
            return self._overlap.step()
        outputs, self._pending = self._pending, []
        sched = self._schedule()
        if not sched.empty:
            logits = self.runner.execute(sched)
            outputs += self._postprocess(sched, logits)
        self._end_step(sched)
        return outputs

    def _schedule(self) -> SchedulerOutput:
        sched = self.scheduler.schedule()
        now = self.clock()
        for item in sched.scheduled:
            if item.seq.request.metrics.first_scheduled_time is None:
                item.seq.request.metrics.first_scheduled_time = now
        return sched

    def _end_step(self, sched: SchedulerOutput) -> None:
        self._record(sched)
        if self.config.debug_integrity:
            self.check_integrity()

    def _postprocess(self, sched: SchedulerOutput, logits: Any) -> list[RequestOutput]:
        """The step's tokens sampled and handed to the scheduler's state; the outputs this step reports."""
        groups = self._groups(self.scheduler.update_computed_rows(sched))
        rows = self._sample_rows(groups)
        return self._apply(self._pairs(groups, self._sample_now(logits, groups, rows)))

    def _groups(self, seqs: list[Sequence | None]) -> list[list[Sequence]]:
        """Per logits row, the sequences that draw from it: a prompt just computed forks (n>1); none for a
        sequence that finished since its step was scheduled (async scheduling)."""
        return [[] if seq is None else self._fork(seq) if self._needs_fork(seq) else [seq] for seq in seqs]

    @staticmethod
    def _sample_rows(groups: list[list[Sequence]]) -> list[list[tuple[int, int, SamplingParams]]]:
        return [[(s.seq_id, s.seed, s.request.params) for s in group] for group in groups]

    @staticmethod
    def _pairs(groups: list[list[Sequence]], sampled: list[list[int]]) -> list[tuple[Sequence, int]]:
        return [(seq, token) for group, tokens in zip(groups, sampled) for seq, token in zip(group, tokens)]

    def _needs_host_sampling(self) -> bool:
        """Logprobs asked (by a request, or `record_logprobs`): the step samples on the host, even under async."""
        return bool(self._logprob_requests) or self.logprobs is not None

    def _sample_now(self, logits: Any, groups: list[list[Sequence]],
                    rows: list[list[tuple[int, int, SamplingParams]]]) -> list[list[int]]:
        """The tokens on the host (the step's device work done), logprobs kept where asked."""
        if self.logprobs is not None:
            for group, row in zip(groups, logits.log_softmax(-1).cpu()):
                if group:
                    self.logprobs.setdefault(group[0].request.request_id, []).append(row)
        if self._logprob_requests:  # only a step with such a request computes logprobs
            sampled, logprobs = self.sampler.sample_with_logprobs(logits, rows)
            self._keep_logprobs(groups, logprobs)
            return sampled
        return self.sampler.sample(logits, rows)

    def _apply(self, pairs: list[tuple[Sequence, int]]) -> list[RequestOutput]:
        """Sampled tokens handed to the scheduler's state (stops, finished sequences freed); the outputs."""
        now = self.clock()
        update = self.scheduler.update_from_output(pairs, now, self._hits_stop_string)
        for seq in update.finished:
            self.sampler.forget(seq.seq_id)
        reported: dict[str, Request] = {}  # requests this step reports: finished ones, and every CUMULATIVE one
        for seq, _ in pairs:
            req = seq.request
            if seq.seq_id in update.closing:
                self._close(req, now)
                reported[req.request_id] = req
            elif req.params.output_kind is RequestOutputKind.CUMULATIVE:
                reported[req.request_id] = req
        return [self._output(req) for req in reported.values()]

    @staticmethod
    def _keep_logprobs(groups: list[list[Sequence]], logprobs: list[list[TokenLogprob | None]]) -> None:
        for group, row in zip(groups, logprobs):
            for seq, lp in zip(group, row):
                if lp is not None:
                    seq.logprobs.append(lp)

    @staticmethod
    def _needs_fork(seq: Sequence) -> bool:
        return seq.request.params.n > len(seq.request.seqs) and seq.num_output_tokens == 0

    def _fork(self, parent: Sequence) -> list[Sequence]:
        """After the prompt is computed, the other n-1 samples share its blocks (copy-on-write)."""
        group = [parent]
        for index in range(1, parent.request.params.n):
            child = Sequence(next(self._seq_ids), parent.request, index, list(parent.token_ids), parent.tier,
                             parent.seed + index * 7919, parent.num_computed_tokens, prefix_checked=True)
            self.kv.fork(parent, child)
            self.scheduler.add_running(child)
            parent.request.seqs.append(child)
            group.append(child)
        return group

    def _close(self, req: Request, now: float) -> None:
        """A request whose last sample finished at `now` leaves the engine."""
        req.metrics.finished_time = now
        self.requests.pop(req.request_id, None)
        self._logprob_requests.discard(req.request_id)

    def _retire(self, seq: Sequence) -> None:
        self.scheduler.remove(seq)
        self.sampler.forget(seq.seq_id)

    def _output(self, req: Request) -> RequestOutput:
        if req.rejected_reason is not None:
            outs = [CompletionOutput(0, [], "rejected")]
        else:
            outs = [CompletionOutput(s.index, s.output_token_ids, s.finish_reason, self._text(s),
                                     list(s.logprobs) if s.logprobs else None)
                    for s in sorted(req.seqs, key=lambda s: s.index)]
        if req.finished:
            for seq in req.seqs:
                self._detokenizers.pop(seq.seq_id, None)
        return RequestOutput(req.request_id, req.prompt_token_ids, outs, req.finished, req.metrics,
                             req.rejected_reason)

    def _text(self, seq: Sequence) -> str | None:
        """The text of `seq`'s output so far, decoding only the tokens added since its last output."""
        params = seq.request.params
        if self.tokenizer is None or not params.detokenize:
            return None
        detok = self._detokenizer(seq)
        new = seq.token_ids[seq.num_prompt_tokens + len(detok.token_ids) :]
        if seq.finish_reason == "stop" and detok.stopped is None and not params.include_stop_str_in_output:
            new = new[:-1]  # a stop token (EOS, stop_token_ids) is in the ids, not in the text (as in vLLM)
        detok.add(new)
        if seq.finish_reason is not None:
            detok.finish()
        return detok.text

    def _hits_stop_string(self, seq: Sequence) -> bool:
        """Decode `seq`'s new tokens now (each step, only for requests with stop strings): does its text stop?"""
        detok = self._detokenizer(seq)
        detok.add(seq.token_ids[seq.num_prompt_tokens + len(detok.token_ids) :])
        return detok.stopped is not None

    def _detokenizer(self, seq: Sequence) -> IncrementalDetokenizer:
        detok = self._detokenizers.get(seq.seq_id)
        if detok is None:
            from runtime.detokenizer import IncrementalDetokenizer  # transformers: only with a tokenizer

            params = seq.request.params
            detok = self._detokenizers[seq.seq_id] = IncrementalDetokenizer(
                self.tokenizer, params.skip_special_tokens, params.stop, params.include_stop_str_in_output)
        return detok

    # ---- accounting ----------------------------------------------------------------------------
    def live_sequences(self) -> list[Sequence]:
        return [s for r in self.requests.values() for s in r.seqs if s.status is not SeqStatus.FINISHED]

    def check_integrity(self) -> None:
        check_integrity(self.kv, self.live_sequences())

    def _record(self, sched: SchedulerOutput) -> None:
        usage = self.kv.usage(self.scheduler.running)
        s = self.scheduler
        self.last_step = StepStats(
            self.clock(), len(s.running), len(s.waiting), len(s.swapped), sched.num_batched_tokens,
            sched.num_preempted, usage.used_blocks, usage.total_blocks, usage.cached_blocks,
            usage.allocated_slots, usage.used_slots)
        self.totals.add(self.last_step)


def token_range(prompt: Seq[int]) -> tuple[int, int]:
    """(lowest, highest) token id of a prompt: a pass over a list each time, remembered for a tuple (it cannot
    change; `IdentityCache`), since a pass costs ~25 ns a token and a replay adds the same tuples on every run."""
    if not isinstance(prompt, tuple):
        return min(prompt), max(prompt)
    return _RANGES.get(prompt, None, lambda: (min(prompt), max(prompt)))


_RANGES: IdentityCache[tuple[int, int]] = IdentityCache(1 << 16)  # a replay window's prompts
