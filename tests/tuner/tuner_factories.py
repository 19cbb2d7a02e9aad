"""Factories for the replay, metrics and trial-isolation tests: tiny CPU runtimes, traffic, records."""

from __future__ import annotations

import copy
from typing import Any

from runtime import EngineConfig, LLMEngine
from tuner.config import ObjectiveName, SloConfig
from tuner.measure.job import MeasurePlan, TrialJob
from tuner.measure.replay import ReplayClock
from tuner.measure.timeline import RequestRecord
from tuner.traffic import TrafficRequest

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


def tiny_config(**sections: dict[str, Any]) -> EngineConfig:
    return EngineConfig.from_mapping(tiny_runtime(**sections))


def tiny_engine(**sections: dict[str, Any]) -> tuple[LLMEngine, ReplayClock]:
    """An engine on a replay clock that checks its block bookkeeping after every step."""
    clock = ReplayClock()
    config = EngineConfig.from_mapping({**tiny_runtime(**sections), "debug_integrity": True})
    return LLMEngine(config, clock=clock), clock


def request(rid: str, arrival_s: float, prompt_len: int, output_tokens: int, first_id: int = 10) -> TrafficRequest:
    """A request whose prompt is `prompt_len` consecutive ids from `first_id` (prompts whose ranges do not
    overlap share no prefix)."""
    ids = tuple(first_id + i for i in range(prompt_len))
    return TrafficRequest(rid, arrival_s, ids, output_tokens, f"test:{rid}")


def burst(n: int, prompt_len: int = 16, output_tokens: int = 4, at: float = 0.0) -> tuple[TrafficRequest, ...]:
    """`n` requests arriving together, r0..r{n-1}, with disjoint prompts (no prefix-cache hits)."""
    return tuple(request(f"r{i}", at, prompt_len, output_tokens, first_id=10 + i * prompt_len) for i in range(n))


def job(runtime: dict[str, Any], traffic_key: str, *, slo: SloConfig | None = None, number: int = 0,
        repeats: int = 1, warmup: int = 0) -> TrialJob:
    """A goodput trial of `runtime` (one replay at the window's own rate) on the traffic sent under `traffic_key`."""
    plan = MeasurePlan(ObjectiveName.goodput, slo or SloConfig(), repeats, warmup_requests=warmup)
    return TrialJob(number, EngineConfig.from_mapping(runtime), None, traffic_key, plan)


def record(rid: str, arrival: float, first_token: float | None, token_times: tuple[float, ...], *,
           first_scheduled: float | None = None, prompt_tokens: int = 16, cached_tokens: int = 0,
           preemptions: int = 0, rejected_reason: str | None = None) -> RequestRecord:
    """A replayed request's record by hand: finished at its last token (at arrival when it has none)."""
    finished = token_times[-1] if token_times else arrival
    return RequestRecord(rid, arrival, first_scheduled if first_scheduled is not None else first_token, first_token,
                         finished, token_times, prompt_tokens, len(token_times), cached_tokens, preemptions,
                         rejected_reason)
