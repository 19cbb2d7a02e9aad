"""One trial, as the worker process runs it: build the engine, check quality, replay, measure.

Every way a trial can end is a `TrialStatus` with a reason; nothing here lets an exception escape.
"""

from __future__ import annotations

import enum
import json
import resource
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from runtime import ConfigError, EngineConfig, LLMEngine
from runtime.model.llama import LlamaForCausalLM
from runtime.model.loader import ModelLoadError, load_model
from runtime.placement import resolve_device, resolve_dtype
from tuner.config import QualityConfig, SloConfig
from tuner.metrics import goodput, latency_row, summarize
from tuner.quality import Probe, QualityResult, compare, run_probe
from tuner.replay import ReplayResult, replay
from tuner.traffic import TrafficRequest, rebase

GIB = float(1 << 30)


class TrialStatus(str, enum.Enum):
    ok = "ok"
    infeasible = "infeasible"  # the config cannot start (too little memory for it, a bad combination)
    oom = "oom"  # ran out of memory while running
    error = "error"  # raised
    timeout = "timeout"  # killed by the supervisor after tuner.trial_timeout_s
    died = "died"  # the worker process died (killed, crashed)
    pruned = "pruned"  # stopped early by the pruner


@dataclass(frozen=True)
class TrialJob:
    number: int
    runtime: dict[str, Any]  # nested EngineConfig mapping of this trial
    reference_runtime: dict[str, Any] | None  # set when the trial changes numerics: the quality reference
    traffic_key: str  # which traffic (sent to the worker once) to replay
    objective: str  # goodput | pareto | capacity
    slo: SloConfig
    quality: QualityConfig
    report_every: int = 0  # report partial goodput to the pruner every N finished requests; 0: never
    capacity_steps: int = 5  # replays a capacity search may spend


@dataclass(frozen=True)
class TrialOutcome:
    status: TrialStatus
    metrics: dict[str, float] = field(default_factory=dict)
    latency_rows: tuple[dict[str, Any], ...] = ()
    reason: str | None = None
    quality: QualityResult | None = None
    capacity_scale: float | None = None
    setup_s: float = 0.0  # engine build (and model load unless reused), the per-trial overhead
    model_reused: bool = False


class ModelCache:
    """Keeps one model's weights loaded across trials (safe: trials only read them)."""

    def __init__(self) -> None:
        self.key: tuple[Any, ...] | None = None
        self.model: LlamaForCausalLM | None = None
        self.probes: dict[str, Probe] = {}

    def get(self, config: EngineConfig) -> tuple[LlamaForCausalLM, bool]:
        device = resolve_device(config.device)
        dtype = resolve_dtype(config.model.dtype, device)
        key = (config.model.name, dtype, config.model.seed, str(device))
        if key == self.key and self.model is not None:
            return self.model, True
        self.model, self.probes = None, {}
        if device.type == "cuda":
            torch.cuda.empty_cache()
        self.model, self.key = load_model(config.model.name, dtype, device, config.model.seed), key
        return self.model, False


Report = Callable[[int, float], bool]  # (requests finished, partial goodput) -> keep going?


def run_trial(job: TrialJob, requests: Sequence[TrafficRequest], models: ModelCache, report: Report) -> TrialOutcome:
    start = time.perf_counter()
    try:
        config = EngineConfig.from_mapping(job.runtime)
        model, reused = models.get(config)
        _reset_peak(config)
        engine = LLMEngine(config, model=model)
        setup_s = time.perf_counter() - start
        quality = _quality(job, config, model, models)
        if quality is not None and quality.violation(job.quality) > 0:
            return TrialOutcome(TrialStatus.infeasible, reason=f"quality guardrail: {quality}", quality=quality,
                                setup_s=setup_s, model_reused=reused)
        if job.objective == "capacity":
            return _capacity(job, config, model, requests, setup_s, reused, quality)
        result = _replay(engine, requests, job, report)
        return _outcome(result, job, config, setup_s, reused, quality)
    except (ConfigError, ModelLoadError) as e:  # InsufficientMemoryError included: the config cannot start
        return TrialOutcome(TrialStatus.infeasible, reason=str(e), setup_s=time.perf_counter() - start)
    except (torch.cuda.OutOfMemoryError, MemoryError) as e:
        return TrialOutcome(TrialStatus.oom, reason=f"out of memory: {_short(e)}")
    except RuntimeError as e:
        oom = "out of memory" in str(e) or "can't allocate memory" in str(e)
        return TrialOutcome(TrialStatus.oom if oom else TrialStatus.error, reason=_describe(e))
    except Exception as e:  # a trial must never take the worker down: report what happened
        return TrialOutcome(TrialStatus.error, reason=_describe(e))


def _replay(engine: LLMEngine, requests: Sequence[TrafficRequest], job: TrialJob, report: Report) -> ReplayResult:
    return replay(engine, requests, progress=lambda done, records: report(done, goodput(records, job.slo)),
                  report_every=job.report_every)


def _outcome(result: ReplayResult, job: TrialJob, config: EngineConfig, setup_s: float, reused: bool,
             quality: QualityResult | None, scale: float | None = None) -> TrialOutcome:
    metrics = summarize(result, job.slo, _peak_gb(config))
    if quality is not None:
        metrics |= {"quality_token_agreement": quality.token_agreement, "quality_mean_kl": quality.mean_kl}
    if scale is not None:
        metrics["capacity_scale"] = scale
    status = TrialStatus.pruned if result.stopped_early else TrialStatus.ok
    rows = tuple(latency_row(r) for r in result.records)
    return TrialOutcome(status, metrics, rows, "pruned on partial goodput" if result.stopped_early else None,
                        quality, scale, setup_s, reused)


def _capacity(job: TrialJob, config: EngineConfig, model: LlamaForCausalLM, requests: Sequence[TrafficRequest],
              setup_s: float, reused: bool, quality: QualityResult | None) -> TrialOutcome:
    """The highest arrival-rate scale (x the traffic's own rate) at which the SLO is still met."""
    def attempt(scale: float) -> ReplayResult:
        engine = LLMEngine(config, model=model)
        return replay(engine, rebase(requests, scale))

    def met(result: ReplayResult) -> bool:
        return summarize(result, job.slo, 0.0)["slo_met"] == 1.0

    low, high, best = 0.0, None, None  # low: best passing scale; high: lowest failing scale
    scale = 1.0
    for _ in range(job.capacity_steps):
        result = attempt(scale)
        if met(result):
            low, best = scale, result
        else:
            high = scale
        if high is None:
            scale *= 2  # still passing: double the rate
        elif low == 0.0:
            scale /= 2  # failing from the start: halve it
        else:
            scale = (low + high) / 2  # bracketed: bisect
    final = best or result
    return _outcome(final, job, config, setup_s, reused, quality, scale=low)


def _quality(job: TrialJob, config: EngineConfig, model: LlamaForCausalLM, models: ModelCache) -> QualityResult | None:
    if job.reference_runtime is None:
        return None
    key = json.dumps(job.reference_runtime, sort_keys=True)
    if key not in models.probes:
        reference = EngineConfig.from_mapping(job.reference_runtime)
        models.probes[key] = run_probe(replace(reference, metadata=None), model, job.quality)
    return compare(models.probes[key], run_probe(config, model, job.quality))


def _reset_peak(config: EngineConfig) -> None:
    if resolve_device(config.device).type == "cuda":
        torch.cuda.reset_peak_memory_stats()


def _peak_gb(config: EngineConfig) -> float:
    """CUDA: peak allocated this trial. CPU: the worker process's peak resident set (kB on Linux)."""
    if resolve_device(config.device).type == "cuda":
        return torch.cuda.max_memory_allocated() / GIB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB


def _short(e: BaseException) -> str:
    return str(e).splitlines()[0][:300] if str(e) else type(e).__name__


def _describe(e: BaseException) -> str:
    """`Type: message (at file:line)`: enough to find the failing line without a full traceback."""
    frames = traceback.extract_tb(e.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(e).__name__}: {_short(e)}{where}"
