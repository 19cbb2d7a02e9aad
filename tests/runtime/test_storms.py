"""Abort and preemption storms: thousands of requests through a pool that holds only a few at a time.

A storm is a seeded random interleaving of add_request / step / abort on an engine whose pool is so
small that preemption (recompute, or swap falling back to recompute when the swap pool is full)
happens constantly; n > 1 sampling, prompts sharing prefixes and invalid prompts are in the mix. The
engine checks its block bookkeeping after every step (debug_integrity). A storm runs in three parts
of PER_PART requests (a warm-up, then two measured halves), drained after each: every request
finishes exactly once with the reason it should, nothing of a finished request stays in the engine,
the gc-tracked object count grows by no more than OBJECT_NOISE, and RSS grows by less than RSS_GROWTH_LIMIT from the end
of the first half to the end of the second.
"""

from __future__ import annotations

import gc
import os
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import pytest

from runtime import LLM, LLMEngine, SamplingParams
from runtime.engine import StepStats
from runtime.outputs import CompletionOutput, RequestOutput
from tests.factories import assert_drained, make_llm

VOCAB = 512  # the tiny checkpoint of tests/conftest.py
EOS = 2
MAX_MODEL_LEN = 48
PER_PART = 700  # requests per part; a storm is a warm-up part and two measured halves: 2100 per engine
RSS_GROWTH_LIMIT = 2 << 20  # bytes the second half may add to RSS: its StepStats (~0.3 MB) and allocator noise
# Objects a measured part may add without counting as a leak: a daemon thread of an earlier test (a
# progress bar's monitor, say) can hold a list or two when gc.get_objects() runs (CI once saw +1
# then -1). A leak of one object per request or per step would add at least PER_PART.
OBJECT_NOISE = 8

# 20 device blocks of 4 tokens: one request of max_model_len needs 12, a typical one 4 to 7.
STORM = dict(block_size=4, max_model_len=MAX_MODEL_LEN, num_gpu_blocks_override=20, max_num_seqs=8,
             max_num_batched_tokens=24, enable_chunked_prefill=True)
MODES = {
    "recompute": dict(STORM, preemption_mode="recompute"),
    # A swap pool of 15 blocks (2 KiB each): some victims swap out, the rest fall back to recompute.
    "swap": dict(STORM, preemption_mode="swap", swap_space=0.00003),
}


@dataclass
class Ledger:
    """What the storm did, and what the engine reported back."""

    params: dict[str, SamplingParams] = field(default_factory=dict)  # every request added
    invalid: set[str] = field(default_factory=set)  # added with a prompt the engine must reject
    aborted: set[str] = field(default_factory=set)  # aborted while still in the engine
    finished: dict[str, RequestOutput] = field(default_factory=dict)
    steps: int = 0

    def record(self, outputs: list[RequestOutput]) -> None:
        for out in outputs:
            assert out.request_id not in self.finished, f"{out.request_id} reported after it finished"
            if out.finished:
                self.finished[out.request_id] = out


def _prompt(rng: random.Random, bases: list[list[int]]) -> list[int]:
    tail = [rng.randrange(3, VOCAB) for _ in range(rng.randint(1, 8))]
    if rng.random() < 0.6:  # a shared prefix of whole blocks, so prefix-cache hits are frequent
        return rng.choice(bases)[: 4 * rng.randint(1, 4)] + tail
    return tail + [rng.randrange(3, VOCAB) for _ in range(rng.randint(0, 12))]


def _invalid_prompt(rng: random.Random) -> list[int]:
    return rng.choice([[], [5, VOCAB + 7], [-1, 5], [7] * MAX_MODEL_LEN])


def _params(rng: random.Random) -> SamplingParams:
    n = rng.choice([1, 1, 1, 2, 3])
    if rng.random() < 0.4:
        return SamplingParams(n=n, temperature=0.0, max_tokens=rng.randint(1, 6), ignore_eos=rng.random() < 0.5)
    seed = rng.choice([None, rng.randrange(1 << 30)])
    return SamplingParams(n=n, temperature=1.0, top_k=rng.choice([0, 20]), top_p=rng.choice([1.0, 0.9]),
                          seed=seed, max_tokens=rng.randint(1, 6), ignore_eos=rng.random() < 0.5)


def _add(engine: LLMEngine, ledger: Ledger, rng: random.Random, bases: list[list[int]], rid: str) -> None:
    params = _params(rng)
    if rng.random() < 0.02:
        ledger.invalid.add(rid)
        prompt = _invalid_prompt(rng)
    else:
        prompt = _prompt(rng, bases)
    engine.add_request(rid, prompt, params)
    ledger.params[rid] = params


def _abort(engine: LLMEngine, ledger: Ledger, rng: random.Random) -> None:
    """Abort a random request: mostly one still running, sometimes a finished or unknown id (a no-op)."""
    ids = list(ledger.params)
    rid = rng.choice(ids) if ids and rng.random() < 0.2 else f"r{rng.randrange(len(ids) + 5)}"
    live = [r for r in ids[-40:] if r in engine.requests]
    if live and rng.random() < 0.8:
        rid = rng.choice(live)
    if rid in engine.requests:
        ledger.aborted.add(rid)
    engine.abort(rid)


def storm(llm: LLM, ledger: Ledger, rng: random.Random, first: int, count: int) -> None:
    """Add requests r{first}..r{first+count-1} interleaved with steps and aborts, then drain."""
    engine = llm.engine
    bases = [[rng.randrange(3, VOCAB) for _ in range(16)] for _ in range(4)]
    next_id = first
    while next_id < first + count:
        roll = rng.random()
        if roll < 0.35:
            for _ in range(min(rng.randint(1, 3), first + count - next_id)):
                _add(engine, ledger, rng, bases, f"r{next_id}")
                next_id += 1
        elif roll < 0.45:
            _abort(engine, ledger, rng)
        else:
            ledger.record(engine.step())
            ledger.steps += 1
    while engine.has_unfinished_requests():
        ledger.record(engine.step())
        ledger.steps += 1


def outcome(ledger: Ledger, rid: str) -> str:
    """How request `rid` ended (rejected, aborted or completed), checking its outputs fit that end."""
    out, params = ledger.finished[rid], ledger.params[rid]
    reasons = [c.finish_reason for c in out.outputs]
    if rid in ledger.invalid:
        assert (reasons, out.outputs[0].token_ids, out.rejected_reason is not None) == (["rejected"], [], True)
        return "rejected"
    assert out.rejected_reason is None
    if rid in ledger.aborted:
        assert "abort" in reasons, rid
        assert all(len(c.token_ids) < params.max_tokens for c in out.outputs if c.finish_reason == "abort")
        return "aborted"
    assert [c.index for c in out.outputs] == list(range(params.n)), rid
    for c in out.outputs:
        if c.finish_reason == "length":
            assert len(c.token_ids) == params.max_tokens
        else:
            assert (c.finish_reason, c.token_ids[-1], params.ignore_eos) == ("stop", EOS, False), rid
            assert len(c.token_ids) <= params.max_tokens
    return "completed"


def assert_outcomes(ledger: Ledger) -> Counter:
    """Every request finished exactly once, for the right reason, with the right number of tokens."""
    never = {rid: ledger.params[rid] for rid in ledger.params if rid not in ledger.finished}
    assert never == {}, f"{len(never)} requests never reported finished"
    assert len(ledger.finished) == len(ledger.params)
    kinds = Counter(outcome(ledger, rid) for rid in ledger.finished)
    assert (kinds["rejected"], kinds["aborted"]) == (len(ledger.invalid), len(ledger.aborted))
    return kinds


def assert_empty(llm: LLM) -> None:
    """Drained: no block held, and the engine keeps nothing of a finished request."""
    assert_drained(llm)
    engine = llm.engine
    assert (engine.requests, engine._pending, engine.sampler.generators) == ({}, [], {})
    sched = engine.scheduler
    assert (sched.waiting, sched.running, sched.swapped) == ([], [], [])
    kv = engine.kv
    assert (kv.tables, kv.hashes, kv.cpu_tables) == ({}, {}, {})


class Footprint(NamedTuple):
    objects: Counter  # objects the garbage collector tracks by type, but for StepStats and this test's records
    rss: int  # resident set size, bytes


def footprint() -> Footprint:
    gc.collect()
    mine = (StepStats, Figures, Footprint, Counter)
    objects = Counter(type(o).__qualname__ for o in gc.get_objects() if type(o) not in mine)
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return Footprint(objects, pages * os.sysconf("SC_PAGE_SIZE"))


class Figures(NamedTuple):
    completed: int  # requests that ran to max_tokens or EOS
    aborted: int
    forked: int  # completed requests with n > 1
    cache_hits: int  # requests that found part of their prompt in the prefix cache
    steps: int


def part_storm(llm: LLM, rng: random.Random, part: int) -> Figures:
    """One part of the storm, drained and checked; only the engine is left holding memory after it."""
    ledger = Ledger()
    storm(llm, ledger, rng, part * PER_PART, PER_PART)
    assert_empty(llm)
    kinds = assert_outcomes(ledger)
    assert kinds.total() == PER_PART
    forked = sum(p.n > 1 for rid, p in ledger.params.items() if rid not in ledger.aborted | ledger.invalid)
    hits = sum(o.metrics.num_cached_tokens > 0 for o in ledger.finished.values())
    return Figures(kinds["completed"], kinds["aborted"], forked, hits, ledger.steps)


def test_abort_before_the_fork_finishes_an_n_sample_request(llama_dir):
    """n=3 aborted while waiting: one sequence, never forked; the request still ends, and only once."""
    llm = make_llm(llama_dir, block_size=4)
    engine = llm.engine
    engine.add_request("r", [5, 6, 7, 8, 9], SamplingParams(n=3, max_tokens=4, seed=1))
    engine.abort("r")
    assert [(o.request_id, o.finished, o.outputs) for o in engine.step()] == [
        ("r", True, [CompletionOutput(0, [], "abort")])]
    assert (engine.step(), engine.has_unfinished_requests()) == ([], False)
    assert_empty(llm)


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="RSS is read from /proc (Linux)")
@pytest.mark.parametrize("mode", list(MODES))
def test_abort_and_preemption_storm(llama_dir, mode):
    llm = make_llm(llama_dir, **MODES[mode])
    rng = random.Random(f"storm-{mode}")
    # RSS grows ~3 MB once, somewhere in the first 1500 requests (the C allocator settling), then stays flat.
    parts = [part_storm(llm, rng, 0)]
    first = footprint()
    parts.append(part_storm(llm, rng, 1))
    middle = footprint()
    parts.append(part_storm(llm, rng, 2))
    last = footprint()
    for part in parts:
        assert part.aborted >= 50 and part.forked >= 100 and part.cache_hits >= 100, part
    totals = llm.engine.totals
    assert totals.steps == sum(p.steps for p in parts)  # totals, not a record per step: constant memory
    assert totals.preempted >= 200, "the pool is meant to force preemption constantly"
    if mode == "swap":
        assert totals.swapped_steps >= 100
    for before, after in ((first, middle), (middle, last)):
        grown = after.objects - before.objects  # Counter subtraction keeps the types that grew
        assert grown.total() <= OBJECT_NOISE, f"objects grew over a part of {PER_PART} requests: {grown.most_common(8)}"
    assert last.rss - middle.rss <= RSS_GROWTH_LIMIT, f"RSS grew by {last.rss - middle.rss} bytes"
