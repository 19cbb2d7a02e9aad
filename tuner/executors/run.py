"""One trial, as the worker process runs it: the engine on cached weights, the quality guardrail, a
warm-up, then the measurement (`tuner.measure.window.measure_window`) replaying through that one engine.

One engine per trial: every replay resets it (same weights, same KV pool), so no probe ever holds a
second pool. Every way a trial can end is a `TrialStatus` with a reason; nothing here lets an
exception escape.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

import torch

from runtime import (
    ConfigError,
    LLMEngine,
    StepLog,
    WeightCache,
    frozen_heap,
    load_tokenizer,
    peak_memory_gb,
    reset_peak_memory,
)
from tuner.executors.quality import ProbeSet, compare, run_probe
from tuner.measure.job import Probe, QualityResult, TrialJob, TrialOutcome, TrialStatus
from tuner.measure.outcome import describe_failure, measured_outcome, short_error
from tuner.measure.replay import ReplayClock, engine_replay
from tuner.measure.window import measure_window
from tuner.traffic import TrafficRequest


class Channel(Protocol):
    """How a running trial talks to the study (the supervisor's pipe, or a caller in-process)."""

    def progress(self, probe: int, scale: float, done: int, total: int) -> None: ...

    def checkpoint(self, probe: Probe) -> bool: ...


class WorkerState:
    """What a worker keeps across trials: the weights, and the quality reference probes per config."""

    def __init__(self) -> None:
        self.weights = WeightCache()
        self.references: dict[str, ProbeSet] = {}
        self.tokenizers: dict[str, object | None] = {}  # model name -> its tokenizer (None: it has none)

    def tokenizer(self, model: str) -> object | None:
        if model not in self.tokenizers:
            self.tokenizers[model] = load_tokenizer(model)
        return self.tokenizers[model]


def run_trial(job: TrialJob, requests: Sequence[TrafficRequest], state: WorkerState, channel: Channel) -> TrialOutcome:
    start = time.perf_counter()
    try:
        model, reused = state.weights.get(job.config)
        quality = _quality(job, model, state)  # before the trial's engine: its probe engines come and go first
        if quality is not None and quality.violation(job.quality) > 0:
            return TrialOutcome(TrialStatus.infeasible, reason=f"quality guardrail: {quality.describe(job.quality)}",
                                quality=quality,
                                setup_s=time.perf_counter() - start, model_reused=reused)
        reset_peak_memory(job.config)
        clock = ReplayClock()
        engine = LLMEngine(job.config.synchronous() if job.step_log else job.config, clock=clock, model=model)
        setup_s = time.perf_counter() - start
        log = StepLog(engine) if job.step_log else None
        with frozen_heap():  # no collection walks the weights' and engine's objects while the window replays
            measurement, stopped_at = measure_window(engine_replay(engine, clock), requests, job.plan,
                                                     channel.progress, lambda: peak_memory_gb(job.config),
                                                     channel.checkpoint)
        outcome = measured_outcome(measurement, stopped_at, quality, setup_s, reused)
        return outcome if log is None else replace(outcome, steps=tuple(log.rows))
    except ConfigError as e:  # InsufficientMemoryError and ModelLoadError included: the config cannot start
        return TrialOutcome(TrialStatus.infeasible, reason=str(e), setup_s=time.perf_counter() - start)
    except (torch.cuda.OutOfMemoryError, MemoryError) as e:
        return TrialOutcome(TrialStatus.oom, reason=f"out of memory: {short_error(e)}")
    except RuntimeError as e:
        oom = "out of memory" in str(e) or "can't allocate memory" in str(e)
        return TrialOutcome(TrialStatus.oom if oom else TrialStatus.error, reason=describe_failure(e))
    except Exception as e:  # a trial must never take the worker down: report what happened
        return TrialOutcome(TrialStatus.error, reason=describe_failure(e))


def _quality(job: TrialJob, model: object, state: WorkerState) -> QualityResult | None:
    """The candidate against itself with its numerics-changing knobs neutral."""
    if job.quality is None:
        return None
    reference = replace(job.config.numerics_neutral(), metadata=None)
    key = json.dumps(reference.to_dict(), sort_keys=True)
    tokenizer = state.tokenizer(job.config.model.name)
    if key not in state.references:
        state.references[key] = run_probe(reference, model, job.quality, tokenizer)
    return compare(state.references[key], run_probe(job.config, model, job.quality, tokenizer))
