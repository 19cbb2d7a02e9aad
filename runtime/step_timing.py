"""Time engine steps of chosen compositions on a real engine (the profile command's measurements).

A composition is a list of decodes (their context lengths) and prefill chunks (cached start, new tokens).
Synthetic sequences get their blocks from the engine's own KV manager; the step goes through the
engine's own runner and sampler (greedy), timed from the runner's call until the sampled tokens are on
the host, the device synchronized, exactly the work between schedule() and postprocessing.

    decode of context c     tokens [0, c) in the cache but the last: ScheduledSeq(seq, c - 1, 1)
    chunk (start s, n new)  tokens [0, s) cached, [s, s + n) computed now: ScheduledSeq(seq, s, n)

On an engine with block tiers a sequence takes the first tier whose max_len covers its length, so one
composition can span tiers (`tier_grid`: what a tier past the first costs).
"""

from __future__ import annotations

import random
import statistics
import time
from typing import NamedTuple

import torch

from runtime.engine import LLMEngine
from runtime.outputs import RequestMetrics
from runtime.sampling_params import SamplingParams
from runtime.scheduler import ScheduledSeq, SchedulerOutput
from runtime.sequence import Request, Sequence
from runtime.sim.shape import StepShaper
from runtime.sim.stepmodel import StepSample, StepShape, Variant

_GREEDY = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)


class TimedStep(NamedTuple):
    """A timed step: (variant, shape) per tier it spans, as the step-time model reads it, and its seconds."""

    parts: tuple[tuple[Variant, StepShape], ...]
    seconds: float


class Composition(NamedTuple):
    decodes: tuple[int, ...] = ()  # context length of each decode
    chunks: tuple[tuple[int, int], ...] = ()  # (cached start, new tokens) of each prefill chunk

    @property
    def tokens(self) -> int:
        """KV slots the composition holds."""
        return sum(self.decodes) + sum(s + n for s, n in self.chunks)

    @property
    def batched_tokens(self) -> int:
        return len(self.decodes) + sum(n for _, n in self.chunks)


def grid(small: bool, max_len: int, max_seqs: int, max_batched: int, seed: int = 0) -> list[Composition]:
    """Decode-only, prefill-only, mixed, then random compositions within the engine's limits."""
    batches = (1, 4, 16) if small else (1, 4, 16, 32, 64, 128, 256)
    contexts = (32, 256) if small else (128, 1024, 4096)
    chunk_sizes = (16, 64, 256) if small else (128, 512, 2048, 8192)
    starts = (0, 128) if small else (0, 2048)
    comps = [Composition(decodes=(c,) * b) for b in batches for c in contexts]
    comps += [Composition(chunks=((s, n),)) for n in chunk_sizes for s in starts]
    comps += [Composition(chunks=((0, n // 4),) * 4) for n in chunk_sizes[1:]]
    mixed_b = (4, 16) if small else (16, 64, 128)
    comps += [Composition(decodes=(contexts[-1],) * b, chunks=((0, n),)) for b in mixed_b for n in chunk_sizes[1:3]]
    rng = random.Random(seed)
    for _ in range(12 if small else 40):
        b = rng.randint(0, max_seqs)
        decodes = tuple(rng.randint(8, contexts[-1]) for _ in range(b))
        n = rng.choice((0, rng.randint(1, chunk_sizes[-1])))
        chunks = ((rng.randint(0, starts[-1]), n),) if n else ()
        comps.append(Composition(decodes, chunks))
    return [c for c in comps if _fits(c, max_len, max_seqs, max_batched)]


def tier_grid(small: bool, split: int, max_len: int, max_seqs: int, max_batched: int) -> list[Composition]:
    """Steps over two tiers split at `split` tokens (a sequence up to it in the first, longer in the second):
    decodes half in each, and a chunk in one tier beside decodes in the other."""
    short, long = max(split // 2, 2), min(max_len, split * 2)
    batches = (2, 8, 16) if small else (2, 16, 64, 128)
    chunk_sizes = (16, 64) if small else (512, 2048)
    comps = [Composition(decodes=(short,) * (b // 2) + (long,) * (b // 2)) for b in batches]
    for b in batches[1:]:
        for n in chunk_sizes:
            comps.append(Composition(decodes=(short,) * b, chunks=((split, n),)))  # the chunk's sequence: second
            comps.append(Composition(decodes=(long,) * b, chunks=((0, min(n, split)),)))  # the chunk's: first
    return [c for c in comps if _fits(c, max_len, max_seqs, max_batched)]


def _fits(c: Composition, max_len: int, max_seqs: int, max_batched: int) -> bool:
    return (0 < c.batched_tokens <= max_batched and len(c.decodes) + len(c.chunks) <= max_seqs
            and all(d <= max_len for d in c.decodes) and all(s + n <= max_len for s, n in c.chunks))


class StepTimer:
    """Times compositions on `engine` (its pool must be empty): the median of `repeats` after one warm-up."""

    def __init__(self, engine: LLMEngine, repeats: int = 3) -> None:
        self.engine = engine
        self.repeats = repeats
        self.shaper = StepShaper(engine.config, engine.kv.tiers, engine.runner.graphs is not None,
                                 engine.runner.piecewise is not None)
        self.cuda = engine.placement is not None and engine.placement.device.type == "cuda"
        self._ids = 0

    def fits_pool(self, c: Composition) -> bool:
        """Every sequence of `c` fits a tier (`kv.tier_for` its length) and each tier's pool holds its blocks."""
        kv, need = self.engine.kv, [0] * len(self.engine.kv.tiers)
        for total in [*c.decodes, *(s + n for s, n in c.chunks)]:
            tier = kv.tier_for(total)
            if tier is None:
                return False
            need[tier] += -(-total // kv.tiers[tier].block_size)
        return all(n <= pool.num_free for n, pool in zip(need, kv.pools, strict=True))

    def time(self, c: Composition) -> list[StepSample]:
        """The one-tier step `c`, the median seconds (`time_step` for a step over several tiers)."""
        step = self.time_step(c)
        if len(step.parts) != 1:
            raise ValueError(f"{c}: spans {len(step.parts)} tiers; time it with time_step")
        (variant, shape), = step.parts
        return [StepSample(variant, shape, step.seconds)]

    def time_step(self, c: Composition) -> TimedStep:
        """The step `c` (on as many tiers as its sequences' lengths take): its parts and median seconds."""
        seqs, out = self._compose(c)
        try:
            seconds = [self._run(out) for _ in range(self.repeats + 1)][1:]
        finally:
            for seq in seqs:
                self.engine.kv.free(seq)
        return TimedStep(tuple(self.shaper.parts(out.scheduled)), statistics.median(seconds))

    def _compose(self, c: Composition) -> tuple[list[Sequence], SchedulerOutput]:
        vocab = self.engine.vocab_size
        items, seqs = [], []
        for total, start, n in [(d, d - 1, 1) for d in c.decodes] + [(s + n, s, n) for s, n in c.chunks]:
            self._ids += 1
            tokens = [(self._ids * 7919 + i) % vocab for i in range(total)]
            req = Request(f"profile-{self._ids}", tokens, _GREEDY, 0.0, 0, RequestMetrics(0.0))
            tier = self.engine.kv.tier_for(total)
            assert tier is not None, "every sequence of the composition must fit a tier"
            seq = Sequence(self._ids, req, 0, list(tokens), tier, self._ids)
            assert self.engine.kv.try_allocate(seq, total) is not None, "the composition must fit the pool"
            seqs.append(seq)
            items.append(ScheduledSeq(seq, start, n, True))
        items.sort(key=lambda s: (s.seq.tier, s.num_new_tokens != 1))  # as the scheduler orders a step
        return seqs, SchedulerOutput(tuple(items), (), (), (), c.batched_tokens, 0)

    def _run(self, out: SchedulerOutput) -> float:
        rows = [[(s.seq.seq_id, s.seq.seed, _GREEDY)] for s in out.scheduled]
        self._sync()
        start = time.perf_counter()
        logits = self.engine.runner.execute(out)
        self.engine.sampler.sample(logits, rows)  # host lists: the device work is done
        self._sync()
        return time.perf_counter() - start

    def _sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()
