"""One frozen dataclass per `conf/` group (the search space, the SLO, the tuner, storage, tracking, replay,
validation, quality, the executor), a comment on every field, each value checked in `__post_init__` with a
message that names its dotted key."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING

from tuner.config.names import (
    DEFAULT_PROFILE,
    EXECUTOR_KINDS,
    FIDELITIES,
    LongPrompts,
    ObjectiveName,
    OnError,
    PrunerName,
    ResumeMode,
    SamplerName,
    StorageBackend,
    check,
)

__all__ = ["ExecutorConfig", "ParamConfig", "QualityConfig", "ReplayConfig", "SearchConfig", "SloConfig",
           "StorageConfig", "TrackingConfig", "TunerConfig", "ValidationConfig", "VllmExecutorConfig", "WhenConfig"]


@dataclass(frozen=True)
class WhenConfig:
    """A conditional knob is searched only while another knob has a given value."""

    param: str = MISSING  # name of the knob this one depends on
    equals: Any = MISSING  # the value that knob must take for this one to be active


@dataclass(frozen=True)
class ParamConfig:
    """One knob of the search space (`search.params.NAME`)."""

    path: str = MISSING  # dotted runtime path (runtime.cache.block_size) or a tier field (tiers.boundary)
    type: str = "categorical"  # categorical | int | float
    choices: list[Any] | None = None  # categorical: the values to choose from
    low: float | None = None  # int/float: lower bound (inclusive)
    high: float | None = None  # int/float: upper bound (inclusive)
    log: bool = False  # int/float: sample on a log scale
    step: float | None = None  # int/float: grid step; None: 1 for int, continuous for float
    freeze: Any = None  # not null: not searched, fixed to this value in every trial
    frozen: bool = False  # true (and no freeze value): not searched, the runtime's own value is kept
    when: WhenConfig | None = None  # searched only while another knob has a given value


@dataclass(frozen=True)
class SearchConfig:
    """The search space (conf/search/); `tuner.space.SearchSpace` checks paths and distributions."""

    params: dict[str, ParamConfig] = field(default_factory=dict)  # knob name -> its declaration


@dataclass(frozen=True)
class SloConfig:
    """The service-level objective a request must meet to count towards goodput."""

    ttft_s: float = 2.0  # time to first token, seconds, at most
    tpot_s: float = 0.1  # mean time per output token after the first, seconds, at most
    e2e_s: float | None = None  # end-to-end latency, seconds, at most; None: not bounded
    attainment: float = 0.99  # share of requests that must meet every bound (0.99: the p99 SLO)

    def __post_init__(self) -> None:
        check(self.ttft_s > 0, "slo.ttft_s", f"must be > 0 seconds, got {self.ttft_s}")
        check(self.tpot_s > 0, "slo.tpot_s", f"must be > 0 seconds, got {self.tpot_s}")
        check(self.e2e_s is None or self.e2e_s > 0, "slo.e2e_s", f"must be > 0 seconds, got {self.e2e_s}")
        check(0.0 < self.attainment <= 1.0, "slo.attainment", f"must be in (0, 1], got {self.attainment}")


@dataclass(frozen=True)
class TunerConfig:
    """The Optuna study and how each trial measures: sampler, pruner, objective, repeats, budget."""

    sampler: SamplerName = SamplerName.tpe  # tpe | gp | nsga2 | random | qmc
    seed: int | None = 0  # sampler seed, for reproducible suggestions; None: a random seed
    n_startup_trials: int = 5  # tpe/gp: trials sampled at random before the model is used
    population_size: int = 16  # nsga2: trials per generation
    pruner: PrunerName = PrunerName.incumbent  # incumbent | none (pareto and goodput never prune)
    n_trials: int = 10  # trials in the study, the baseline included; a rerun resumes up to this total
    study_name: str | None = None  # None: the traffic file's stem and the study fingerprint
    resume: ResumeMode = ResumeMode.auto  # auto: refuse to resume a study of other traffic/settings | force
    objective: ObjectiveName = ObjectiveName.capacity  # capacity | goodput | pareto
    capacity_tol: float = 0.05  # capacity: bisect until the bracket is within this relative width
    edge_checks: int = 2  # capacity: probes one, two, ... tolerances below the bisected edge; 0: none
    repeats: int = 3  # replays per deciding probe at most (majority); goodput/pareto: replays per trial
    finalists: int = 3  # best candidates re-measured with the baseline after the search
    warmup_requests: int = 32  # replayed at once and discarded before a trial measures; 0: no warm-up
    trial_timeout_s: float = 900.0  # a trial running longer fails with a timeout; the study goes on
    timeout_s: float | None = None  # start no new trial after this many seconds; None: no limit
    worker_threads: int | None = 1  # torch CPU threads in the trial worker; None: torch's default
    worker_memory_gb: float | None = None  # CPU runs: address-space cap of the worker; a trial past it is an OOM
    # single: every measurement on the executor | sim+real: trials simulated (executor=sim), the finalists and
    # the baseline measured on the real runtime, simulated and measured figures side by side
    fidelity: str = "single"

    def __post_init__(self) -> None:
        for name, low in (("n_trials", 1), ("n_startup_trials", 0), ("population_size", 2), ("repeats", 1),
                          ("finalists", 1), ("warmup_requests", 0), ("edge_checks", 0)):
            value = getattr(self, name)
            check(value >= low, f"tuner.{name}", f"must be >= {low}, got {value}")
        check(self.study_name is None or bool(self.study_name), "tuner.study_name", "must not be empty")
        check(0.001 <= self.capacity_tol <= 1.0, "tuner.capacity_tol",
               f"must be in [0.001, 1], got {self.capacity_tol}")
        check(self.trial_timeout_s > 0, "tuner.trial_timeout_s", f"must be > 0, got {self.trial_timeout_s}")
        check(self.timeout_s is None or self.timeout_s > 0, "tuner.timeout_s",
               f"must be > 0, got {self.timeout_s}")
        check(self.worker_threads is None or self.worker_threads >= 1, "tuner.worker_threads",
               f"must be >= 1 or null, got {self.worker_threads}")
        # Finite: the worker turns it into an int of bytes for setrlimit (int(inf) would kill every worker).
        check(self.worker_memory_gb is None or 0 < self.worker_memory_gb < math.inf, "tuner.worker_memory_gb",
               f"must be > 0 and finite, or null, got {self.worker_memory_gb}")
        check(self.fidelity in FIDELITIES, "tuner.fidelity", f"must be one of {FIDELITIES}, got {self.fidelity!r}")

    @property
    def directions(self) -> tuple[str, ...]:
        """Optuna study directions: pareto maximizes throughput and minimizes p99 latency."""
        return ("maximize", "minimize") if self.objective is ObjectiveName.pareto else ("maximize",)


@dataclass(frozen=True)
class StorageConfig:
    """Where the Optuna study lives; rerunning against the same storage resumes it."""

    backend: StorageBackend = StorageBackend.rdb  # rdb: SQLAlchemy URL | journal: a journal file
    url: str = "sqlite:///optuna.db"  # rdb: sqlite:///f.db or postgresql+psycopg://...; journal: file path
    heartbeat_interval_s: int = 60  # a running trial beats this often; a dead worker's trial goes stale
    grace_period_s: int = 180  # no beat for this long and the trial is failed and retried
    max_retry: int = 2  # times a stale (dead worker's) trial is re-queued
    retry_s: float = 120.0  # RDB: a storage call is retried (with backoff) through an outage this long, then fails

    def __post_init__(self) -> None:
        check(bool(self.url), "storage.url", "must not be empty")
        check(self.backend is StorageBackend.journal or "://" in self.url, "storage.url",
               f"expected an SQLAlchemy URL such as sqlite:///optuna.db, got {self.url!r}")
        check(self.heartbeat_interval_s >= 1, "storage.heartbeat_interval_s",
               f"must be >= 1, got {self.heartbeat_interval_s}")
        check(self.grace_period_s > self.heartbeat_interval_s, "storage.grace_period_s",
               f"must be > storage.heartbeat_interval_s, got {self.grace_period_s}")
        check(self.max_retry >= 0, "storage.max_retry", f"must be >= 0, got {self.max_retry}")
        check(self.retry_s >= 0, "storage.retry_s", f"must be >= 0, got {self.retry_s}")


@dataclass(frozen=True)
class TrackingConfig:
    """MLflow tracking: one parent run per study, one child run per trial."""

    uri: str = "sqlite:///mlflow.db"  # MLflow tracking URI (also `mlflow ui --backend-store-uri`)
    experiment: str = "pagetune"  # MLflow experiment name
    on_unreachable: str = "fail"  # fail: stop before any trial | continue: run, buffer results to a JSONL file

    def __post_init__(self) -> None:
        check(bool(self.uri), "tracking.uri", "must not be empty")
        check(bool(self.experiment), "tracking.experiment", "must not be empty")
        check(self.on_unreachable in ("fail", "continue"), "tracking.on_unreachable",
               f"must be fail or continue, got {self.on_unreachable!r}")


@dataclass(frozen=True)
class ReplayConfig:
    """How the recorded traffic is replayed through the engine (open loop)."""

    time_scale: float = 1.0  # rate scale: arrival times are divided by this, 2.0 replays at twice the rate
    start_s: float = 0.0  # window start, seconds after the trace's first arrival
    duration_s: float | None = None  # window length, seconds; None: to the end of the trace
    max_requests: int | None = None  # at most this many requests (the first of the window); None: all
    sample: float | None = None  # keep this share of the window's requests, drawn with `seed`; None: all
    seed: int = 0  # seed of `sample` and of synthesized token ids
    on_error: OnError = OnError["raise"]  # a malformed line: raise (file:line: reason) or skip and count it
    long_prompts: LongPrompts = LongPrompts.reject  # prompts past the model's length: reject or truncate
    max_rejected_share: float = 0.05  # stop when more of the traffic than this is rejected as too long
    # a capacity is a rate sustained this long: a window replayed faster than it spans this many seconds is a
    # burst, and its capacity is not measured there. 60 s: 5% over capacity (tuner.capacity_tol) puts a server
    # 2 s behind (slo.ttft_s) after 40 s; 0: only a window arriving at once is refused
    min_window_s: float = 60.0
    # an OpenAI-compatible server's API root (http://HOST:PORT/v1: pagetune's, vLLM, SGLang): replay against it
    # over HTTP and measure its own config once (tuner.n_trials=1), nothing searched; None: trials in-process
    target: str | None = None

    def __post_init__(self) -> None:
        check(self.target is None or re.fullmatch(r"https?://[^/\s]+(/\S*)?", self.target) is not None,
               "replay.target", f"expected the server's API root, e.g. http://127.0.0.1:8000/v1, got {self.target!r}")
        check(self.time_scale > 0, "replay.time_scale", f"must be > 0, got {self.time_scale}")
        check(self.start_s >= 0, "replay.start_s", f"must be >= 0 seconds, got {self.start_s}")
        check(self.duration_s is None or self.duration_s > 0, "replay.duration_s",
               f"must be > 0 seconds, got {self.duration_s}")
        check(self.max_requests is None or self.max_requests >= 1, "replay.max_requests",
               f"must be >= 1, got {self.max_requests}")
        check(self.sample is None or 0.0 < self.sample <= 1.0, "replay.sample",
               f"must be in (0, 1], got {self.sample}")
        check(0.0 <= self.min_window_s < math.inf, "replay.min_window_s",
               f"must be >= 0 seconds and finite, got {self.min_window_s}")
        check(0.0 <= self.max_rejected_share <= 1.0, "replay.max_rejected_share",
               f"must be in [0, 1], got {self.max_rejected_share}")


@dataclass(frozen=True)
class ValidationConfig:
    """After the search: the finalists and the baseline measured again, then the pick against the baseline
    on a window the search did not see (tuner.results)."""

    holdout_fraction: float = 0.2  # the last share of the selection's duration kept from the search; 0: none
    select_rounds: int = 3  # interleaved rounds measuring the finalists and the baseline on the search window
    proof_rounds: int = 8  # interleaved rounds measuring the pick and the baseline on the held-out window

    def __post_init__(self) -> None:
        check(0.0 <= self.holdout_fraction < 1.0, "validation.holdout_fraction",
               f"must be in [0, 1), got {self.holdout_fraction}")
        check(self.select_rounds >= 1, "validation.select_rounds", f"must be >= 1, got {self.select_rounds}")
        check(self.proof_rounds >= 2, "validation.proof_rounds",
               f"must be >= 2 (an interval needs two), got {self.proof_rounds}")


@dataclass(frozen=True)
class QualityConfig:
    """Guardrail for knobs that change numerics: a config past a threshold is infeasible."""

    min_token_agreement: float = 0.9  # greedy tokens equal to the reference config's, share at least
    max_mean_kl: float = 0.05  # mean KL(reference || candidate) of next-token distributions, at most
    min_task_score: float = 0.9  # of the task prompts the reference answers right, share still right, at least
    max_sampling_tv: float = 0.01  # total variation between the two sampler paths' distributions, at most
    probe_size: int = 27  # prompts in the fixed probe set (27: every built-in real prompt, tasks first)
    probe_max_tokens: int = 32  # tokens generated per probe prompt

    def __post_init__(self) -> None:
        for name in ("min_token_agreement", "min_task_score", "max_sampling_tv"):
            value = getattr(self, name)
            check(0.0 <= value <= 1.0, f"quality.{name}", f"must be in [0, 1], got {value}")
        check(self.max_mean_kl >= 0, "quality.max_mean_kl", f"must be >= 0, got {self.max_mean_kl}")
        for name in ("probe_size", "probe_max_tokens"):
            check(getattr(self, name) >= 1, f"quality.{name}", f"must be >= 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class VllmExecutorConfig:
    """`executor=vllm`: each trial's config on `vllm serve --config FILE`, measured over HTTP (docs/VLLM.md)."""

    command: list[str] = field(default_factory=lambda: ["vllm"])  # argv before `serve --config FILE ...`
    probe: list[str] | None = None  # argv printing vllm_probe.py's JSON; None: this Python runs it
    model: str | None = None  # what vLLM serves (Hugging Face id or folder); None: runtime.model.name
    args: dict[str, Any] = field(default_factory=dict)  # engine args of every start, the baseline's too
    #                              (load_format: dummy, tokenizer: DIR, max_model_len: N); checked like the knobs
    start_timeout_s: float = 900.0  # a fresh host compiles for minutes (FlashInfer JIT, torch.compile, graphs)
    stop_grace_s: float = 30.0  # SIGTERM, then SIGKILL after this long
    cache_dir: Path | None = None  # VLLM_CACHE_ROOT shared by every start; None: ~/.cache/pagetune/vllm
    work_dir: Path | None = None  # the trials' config files and server logs; None: a new temporary folder
    only_args: bool = False  # write no runtime knob, only `vllm.*` ones (tuner.vllm_check: a file as it is)

    def __post_init__(self) -> None:
        check(bool(self.command), "executor.vllm.command", "must name the program, e.g. [vllm]")
        check(self.probe is None or bool(self.probe), "executor.vllm.probe", "must be null or a command")
        for name in ("start_timeout_s", "stop_grace_s"):
            check(getattr(self, name) > 0, f"executor.vllm.{name}", f"must be > 0, got {getattr(self, name)}")


@dataclass(frozen=True)
class ExecutorConfig:
    """What runs the trials: the real runtime in a worker process, the simulator in-process (`executor=sim`), or
    vLLM itself (`executor=vllm`)."""

    kind: str = "auto"  # auto: real on a GPU, else sim on the profile when it exists, else real | real | sim | vllm
    profile: Path | None = None  # a GPU profile (python -m runtime.profile) to simulate; None: DEFAULT_PROFILE
    vllm: VllmExecutorConfig = field(default_factory=VllmExecutorConfig)  # executor=vllm only

    def __post_init__(self) -> None:
        check(self.kind in EXECUTOR_KINDS, "executor.kind", f"must be one of {EXECUTOR_KINDS}, got {self.kind!r}")

    @property
    def profile_path(self) -> Path:
        return self.profile if self.profile is not None else DEFAULT_PROFILE
