"""What crosses between the study (parent process) and the trial worker: a job with its measurement
plan, and the outcome with its measurement. Plain, picklable, torch-free types: the parent unpickles
them without importing the runtime's engine.
"""

from __future__ import annotations

import enum
import statistics
from dataclasses import dataclass
from typing import Any, NamedTuple

from runtime import EngineConfig
from tuner.config import ObjectiveName, QualityConfig, SloConfig

__all__ = [
    "Hardware",
    "MeasurePlan",
    "Measurement",
    "Probe",
    "QualityResult",
    "ReplaySummary",
    "TrialJob",
    "TrialOutcome",
    "TrialStatus",
]


class TrialStatus(str, enum.Enum):
    ok = "ok"
    infeasible = "infeasible"  # the config cannot start (too little memory for it) or fails the quality guardrail
    oom = "oom"  # ran out of memory while running
    error = "error"  # raised
    timeout = "timeout"  # killed by the supervisor after tuner.trial_timeout_s
    died = "died"  # the worker process died (killed, crashed)
    pruned = "pruned"  # stopped at its checkpoint: it fails the SLO at the incumbent's capacity


@dataclass(frozen=True)
class MeasurePlan:
    """How a trial measures its config (see `tuner.measure.measure`)."""

    objective: ObjectiveName
    slo: SloConfig
    repeats: int  # replays per probe at most; the majority decides, a clear first replay alone
    start_scale: float = 1.0  # capacity: the first probe's rate scale (x the window's arrival rate)
    first_step: float = 2.0  # capacity: the first bracketing factor; it squares at every further step
    tol: float = 0.05  # capacity: bisect until upper / lower scale <= 1 + tol
    checkpoint: bool = False  # capacity: the first probe is the early-stopping checkpoint (the incumbent's)
    warmup_requests: int = 0  # replayed all at once and discarded before any measured replay; 0: none
    min_window_s: float = 0.0  # capacity: no probe faster than the window spanning this long (replay.min_window_s)
    edge_checks: int = 2  # capacity: probes one, two, ... tolerances below the edge (a fail there moves it)


@dataclass(frozen=True)
class TrialJob:
    number: int  # Optuna trial number; negative for the re-measurements after the search
    config: EngineConfig  # built and validated once, by the search space
    quality: QualityConfig | None  # set when `config` changes numerics: the guardrail runs first
    traffic_key: str  # which traffic (sent to the worker once) to replay
    plan: MeasurePlan
    step_log: bool = False  # also return the timed steps of its replays (a real engine: to refit a GPU profile)


class ReplaySummary(NamedTuple):
    """One measured replay of the whole window at a rate scale."""

    scale: float
    passed: bool  # SLO attainment >= slo.attainment
    decisive: bool  # so clear that repeating it could not change the probe's verdict
    metrics: dict[str, float]  # tuner.measure.metrics.summarize
    rows: tuple[dict[str, Any], ...] = ()  # per-request latencies (tuner.measure.metrics.latency_row)


class Probe(NamedTuple):
    """The replays at one rate scale and their verdict (the majority; a decisive first replay alone)."""

    scale: float
    replays: tuple[ReplaySummary, ...]
    passed: bool

    def median(self, name: str) -> float:
        """The median of a metric over this probe's replays."""
        return statistics.median(r.metrics[name] for r in self.replays)


class Measurement(NamedTuple):
    values: tuple[float, ...]  # the objective value(s); capacity: the highest passing rate scale
    probes: tuple[Probe, ...]  # every probe, in the order run
    metrics: dict[str, float]  # medians at the deciding point, with their spread
    latency_rows: tuple[dict[str, Any], ...]  # per request, from one replay at the deciding point
    saturated: bool = False  # capacity: the SLO held up to the highest scale the window allows


class QualityResult(NamedTuple):
    """The guardrail's figures (`tuner.executors.quality`): the candidate against itself with numerics neutral."""

    token_agreement: float
    mean_kl: float
    task_score: float | None = None  # None: no tokenizer, or the reference answered no task
    sampling_tv: float = 0.0

    def margins(self, cfg: QualityConfig) -> dict[str, float]:
        """Per figure: how far past its threshold (> 0: broken), in that figure's own unit."""
        out = {"token agreement": cfg.min_token_agreement - self.token_agreement,
               "mean KL": self.mean_kl - cfg.max_mean_kl, "sampling TV": self.sampling_tv - cfg.max_sampling_tv}
        if self.task_score is not None:
            out["task score"] = cfg.min_task_score - self.task_score
        return out

    def violation(self, cfg: QualityConfig) -> float:
        """> 0 when the candidate breaks a threshold (Optuna's constraint convention), else <= 0."""
        return max(self.margins(cfg).values())

    def describe(self, cfg: QualityConfig) -> str:
        broken = [name for name, m in self.margins(cfg).items() if m > 0]
        task = "n/a" if self.task_score is None else f"{self.task_score:.2f}"
        figures = (f"token agreement {self.token_agreement:.3f}, mean KL {self.mean_kl:.4f}, task score {task}, "
                   f"sampling TV {self.sampling_tv:.4f}")
        return f"{figures} (past the threshold: {', '.join(broken)})" if broken else figures


class Hardware(NamedTuple):
    """The worker's device, as provenance records it (from `runtime.describe_device`)."""

    device_type: str  # cuda | cpu
    name: str
    memory_gb: float | None
    summary: str  # "1 x NVIDIA H200" or "CPU x86_64 x 2 cores"
    versions: str  # "torch 2.13.0, triton 3.6.0, CUDA 13.0"
    unmodelled: frozenset[str] = frozenset()  # dotted runtime fields a simulated device cannot tell apart
    gpus: int = 0  # the GPUs the worker sees (CUDA_VISIBLE_DEVICES applied); 0 on a CPU: what `devices` may use


@dataclass(frozen=True)
class TrialOutcome:
    status: TrialStatus
    measurement: Measurement | None = None  # None when nothing was measured
    reason: str | None = None
    quality: QualityResult | None = None
    setup_s: float = 0.0  # engine build (and model load unless reused): the per-trial overhead
    model_reused: bool = False
    checkpoint: Probe | None = None  # the probe at the incumbent's capacity, for a pruned trial
    steps: tuple[tuple, ...] = ()  # job.step_log: runtime.StepRow of runtime.step_log
