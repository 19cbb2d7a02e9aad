"""Factories for the replay, metrics and trial-isolation tests: tiny CPU runtimes, traffic, records."""

from __future__ import annotations

import copy
from typing import Any

from runtime import EngineConfig, LLMEngine, StepStats
from tuner.config import QualityConfig, SloConfig
from tuner.replay import RequestRecord
from tuner.traffic import TrafficRequest
from tuner.trial import TrialJob

# The "tiny" preset on CPU with a small pool (~3.8k blocks of 4 tokens): engines build in ~20 ms once loaded.
TINY: dict[str, Any] = {
    "model": {"name": "tiny"},
    "device": "cpu",
    "cache": {"device_memory_gb": 0.05},
    "scheduler": {"max_model_len": 128},
}


def tiny_runtime(**sections: dict[str, Any]) -> dict[str, Any]:
    """The nested runtime mapping of TINY with `sections` merged in (`cache={"block_size": 8}`)."""
    runtime = copy.deepcopy(TINY)
    for name, values in sections.items():
        runtime.setdefault(name, {}).update(values)
    return runtime


def tiny_engine(**sections: dict[str, Any]) -> LLMEngine:
    """An engine that checks its block bookkeeping after every step."""
    return LLMEngine(EngineConfig.from_mapping({**tiny_runtime(**sections), "debug_integrity": True}))


def request(rid: str, arrival_s: float, prompt_len: int, output_tokens: int, first_id: int = 10) -> TrafficRequest:
    """A request whose prompt is `prompt_len` consecutive ids from `first_id` (prompts whose ranges do not
    overlap share no prefix)."""
    ids = tuple(first_id + i for i in range(prompt_len))
    return TrafficRequest(rid, arrival_s, ids, output_tokens, f"test:{rid}")


def burst(n: int, prompt_len: int = 16, output_tokens: int = 4, at: float = 0.0) -> tuple[TrafficRequest, ...]:
    """`n` requests arriving together, r0..r{n-1}, with disjoint prompts (no prefix-cache hits)."""
    return tuple(request(f"r{i}", at, prompt_len, output_tokens, first_id=10 + i * prompt_len) for i in range(n))


def job(runtime: dict[str, Any], traffic_key: str, *, report_every: int = 0, slo: SloConfig | None = None,
        number: int = 0) -> TrialJob:
    """A goodput trial of `runtime` on the traffic sent under `traffic_key`, without a quality reference."""
    return TrialJob(number, runtime, None, traffic_key, "goodput", slo or SloConfig(), QualityConfig(),
                    report_every=report_every)


def record(rid: str, arrival: float, first_token: float | None, token_times: tuple[float, ...], *,
           first_scheduled: float | None = None, prompt_tokens: int = 16, cached_tokens: int = 0,
           preemptions: int = 0, rejected_reason: str | None = None) -> RequestRecord:
    """A replayed request's record by hand: finished at its last token (at arrival when it has none)."""
    finished = token_times[-1] if token_times else arrival
    return RequestRecord(rid, arrival, first_scheduled if first_scheduled is not None else first_token, first_token,
                         finished, token_times, prompt_tokens, len(token_times), cached_tokens, preemptions,
                         rejected_reason)


def step(*, batched: int, used_blocks: int, total_blocks: int, allocated_slots: int, used_slots: int,
         time: float = 0.0) -> StepStats:
    """One engine step's stats with the KV fields the metrics read; the queue fields zero."""
    return StepStats(time=time, num_running=0, num_waiting=0, num_swapped=0, num_batched_tokens=batched,
                     num_preempted=0, kv_used_blocks=used_blocks, kv_total_blocks=total_blocks, kv_cached_blocks=0,
                     kv_allocated_slots=allocated_slots, kv_used_slots=used_slots)
