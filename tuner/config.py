"""The tuner's configuration: one frozen dataclass per `conf/` group, its Hydra schema, Optuna builders.

Each section is declared once, below, as a frozen dataclass with a comment on every field; its
`__post_init__` checks values with messages that name the dotted key. Hydra needs mutable
dataclasses, so `hydra_schema` derives a mutable twin of each (same fields, types, defaults) and
the tree is registered in the ConfigStore as `pagetune_schema` (`tuner.schema`): an unknown or mistyped key fails
at compose with Hydra's message naming the key. `load_app_config` turns the composed DictConfig
into these frozen dataclasses; the runtime section is validated by `runtime.config.EngineConfig`.

Nothing instantiates a class named by configuration: samplers, pruners and storages are built from
enum names by fixed tables (`tuner.optuna_setup`).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from runtime.config import ConfigError, EngineConfig
from tuner.schema import hydra_schema

__all__ = [
    "CONF_DIR", "AppConfig", "LongPrompts", "ObjectiveName", "OnError", "ParamConfig", "PrunerName",
    "QualityConfig", "ReplayConfig", "SamplerName", "SearchConfig", "SloConfig", "StorageBackend",
    "StorageConfig", "TrackingConfig", "TrafficFormat", "TunerConfig", "TunerConfigError",
    "ValidationConfig", "WhenConfig", "load_app_config",
]

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"  # the Hydra config tree of the repository


class SamplerName(str, Enum):
    tpe = "tpe"
    gp = "gp"
    nsga2 = "nsga2"
    random = "random"
    qmc = "qmc"


class PrunerName(str, Enum):
    median = "median"
    hyperband = "hyperband"
    none = "none"


class ObjectiveName(str, Enum):
    goodput = "goodput"  # maximize requests/s meeting every SLO
    pareto = "pareto"  # throughput vs. p99 latency, a Pareto front
    capacity = "capacity"  # the highest arrival-rate scale that still meets the SLO


class StorageBackend(str, Enum):
    rdb = "rdb"
    journal = "journal"


class TrafficFormat(str, Enum):
    auto = "auto"
    native = "native"
    mooncake = "mooncake"
    azure = "azure"
    openai = "openai"


class LongPrompts(str, Enum):
    reject = "reject"
    truncate = "truncate"


# Functional form: `raise` is a keyword. Hydra matches enum values by member name.
OnError = Enum("OnError", [("raise", "raise"), ("skip", "skip")], type=str)


class TunerConfigError(ValueError):
    """A tuner configuration value or key is wrong; the message names the dotted key."""


def _check(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise TunerConfigError(f"{key}: {message}")


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
        _check(self.ttft_s > 0, "slo.ttft_s", f"must be > 0 seconds, got {self.ttft_s}")
        _check(self.tpot_s > 0, "slo.tpot_s", f"must be > 0 seconds, got {self.tpot_s}")
        _check(self.e2e_s is None or self.e2e_s > 0, "slo.e2e_s", f"must be > 0 seconds, got {self.e2e_s}")
        _check(0.0 < self.attainment <= 1.0, "slo.attainment", f"must be in (0, 1], got {self.attainment}")


@dataclass(frozen=True)
class TunerConfig:
    """The Optuna study: sampler, pruner, size, objective, timeouts."""

    sampler: SamplerName = SamplerName.tpe  # tpe | gp | nsga2 | random | qmc
    seed: int | None = 0  # sampler seed, for reproducible suggestions; None: a random seed
    n_startup_trials: int = 5  # tpe/gp: trials sampled at random before the model is used
    population_size: int = 16  # nsga2: trials per generation
    pruner: PrunerName = PrunerName.median  # median | hyperband | none (pareto needs none)
    pruner_startup_trials: int = 3  # median: complete trials before any trial is pruned
    pruner_warmup_steps: int = 1  # median: replay checkpoints a trial runs before it may be pruned
    n_trials: int = 10  # trials in the study, the baseline included; a rerun resumes up to this total
    study_name: str = "pagetune"  # the Optuna study (and MLflow parent run); same name + storage resumes
    objective: ObjectiveName = ObjectiveName.goodput  # goodput | pareto | capacity
    trial_timeout_s: float = 900.0  # a trial running longer fails with a timeout; the study goes on
    timeout_s: float | None = None  # start no new trial after this many seconds; None: no limit
    capacity_steps: int = 5  # capacity: replays per trial searching the highest rate scale (x2, then bisect)
    worker_threads: int | None = 1  # torch CPU threads in the trial worker; None: torch's default
    worker_memory_gb: float | None = None  # CPU runs: address-space cap of the worker; a trial past it is an OOM

    def __post_init__(self) -> None:
        for name, low in (("n_trials", 1), ("n_startup_trials", 0), ("population_size", 2),
                          ("pruner_startup_trials", 0), ("pruner_warmup_steps", 0)):
            value = getattr(self, name)
            _check(value >= low, f"tuner.{name}", f"must be >= {low}, got {value}")
        _check(bool(self.study_name), "tuner.study_name", "must not be empty")
        _check(self.trial_timeout_s > 0, "tuner.trial_timeout_s", f"must be > 0, got {self.trial_timeout_s}")
        _check(self.timeout_s is None or self.timeout_s > 0, "tuner.timeout_s",
               f"must be > 0, got {self.timeout_s}")
        _check(self.capacity_steps >= 1, "tuner.capacity_steps", f"must be >= 1, got {self.capacity_steps}")
        _check(self.worker_threads is None or self.worker_threads >= 1, "tuner.worker_threads",
               f"must be >= 1 or null, got {self.worker_threads}")
        # Finite: the worker turns it into an int of bytes for setrlimit (int(inf) would kill every worker).
        _check(self.worker_memory_gb is None or 0 < self.worker_memory_gb < math.inf, "tuner.worker_memory_gb",
               f"must be > 0 and finite, or null, got {self.worker_memory_gb}")
        # Optuna cannot prune multi-objective studies (Trial.report raises there).
        _check(self.objective is not ObjectiveName.pareto or self.pruner is PrunerName.none, "tuner.pruner",
               f"pruning needs a single objective; use tuner.pruner=none with tuner.objective=pareto, "
               f"got {self.pruner.value}")

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

    def __post_init__(self) -> None:
        _check(bool(self.url), "storage.url", "must not be empty")
        _check(self.backend is StorageBackend.journal or "://" in self.url, "storage.url",
               f"expected an SQLAlchemy URL such as sqlite:///optuna.db, got {self.url!r}")
        _check(self.heartbeat_interval_s >= 1, "storage.heartbeat_interval_s",
               f"must be >= 1, got {self.heartbeat_interval_s}")
        _check(self.grace_period_s > self.heartbeat_interval_s, "storage.grace_period_s",
               f"must be > storage.heartbeat_interval_s, got {self.grace_period_s}")
        _check(self.max_retry >= 0, "storage.max_retry", f"must be >= 0, got {self.max_retry}")


@dataclass(frozen=True)
class TrackingConfig:
    """MLflow tracking: one parent run per study, one child run per trial."""

    uri: str = "sqlite:///mlflow.db"  # MLflow tracking URI (also `mlflow ui --backend-store-uri`)
    experiment: str = "pagetune"  # MLflow experiment name
    on_unreachable: str = "fail"  # fail: stop before any trial | continue: run, buffer results to a JSONL file

    def __post_init__(self) -> None:
        _check(bool(self.uri), "tracking.uri", "must not be empty")
        _check(bool(self.experiment), "tracking.experiment", "must not be empty")
        _check(self.on_unreachable in ("fail", "continue"), "tracking.on_unreachable",
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

    def __post_init__(self) -> None:
        _check(self.time_scale > 0, "replay.time_scale", f"must be > 0, got {self.time_scale}")
        _check(self.start_s >= 0, "replay.start_s", f"must be >= 0 seconds, got {self.start_s}")
        _check(self.duration_s is None or self.duration_s > 0, "replay.duration_s",
               f"must be > 0 seconds, got {self.duration_s}")
        _check(self.max_requests is None or self.max_requests >= 1, "replay.max_requests",
               f"must be >= 1, got {self.max_requests}")
        _check(self.sample is None or 0.0 < self.sample <= 1.0, "replay.sample",
               f"must be in (0, 1], got {self.sample}")


@dataclass(frozen=True)
class ValidationConfig:
    """After the search, best and baseline are replayed on a window the search did not see."""

    holdout_fraction: float = 0.2  # last share of the trace (by time) kept from the search; 0: none
    repeats: int = 3  # replays of best and of baseline on the held-out window (for the spread)

    def __post_init__(self) -> None:
        _check(0.0 <= self.holdout_fraction < 1.0, "validation.holdout_fraction",
               f"must be in [0, 1), got {self.holdout_fraction}")
        _check(self.repeats >= 1, "validation.repeats", f"must be >= 1, got {self.repeats}")


@dataclass(frozen=True)
class QualityConfig:
    """Guardrail for knobs that change numerics: a config past a threshold is infeasible."""

    min_token_agreement: float = 0.9  # greedy tokens equal to the reference config's, share at least
    max_mean_kl: float = 0.05  # mean KL(reference || candidate) of next-token distributions, at most
    probe_size: int = 16  # prompts in the fixed probe set
    probe_max_tokens: int = 32  # tokens generated per probe prompt

    def __post_init__(self) -> None:
        _check(0.0 <= self.min_token_agreement <= 1.0, "quality.min_token_agreement",
               f"must be in [0, 1], got {self.min_token_agreement}")
        _check(self.max_mean_kl >= 0, "quality.max_mean_kl", f"must be >= 0, got {self.max_mean_kl}")
        for name in ("probe_size", "probe_max_tokens"):
            _check(getattr(self, name) >= 1, f"quality.{name}", f"must be >= 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class AppConfig:
    """Everything `python -m tuner` runs with, validated."""

    traffic: Path  # the recorded request log (`+traffic=PATH` or `traffic=PATH`)
    traffic_format: TrafficFormat = TrafficFormat.auto  # auto: detected from content
    runtime: EngineConfig = field(default_factory=EngineConfig)  # the engine config trials start from
    search: SearchConfig = field(default_factory=SearchConfig)
    slo: SloConfig = field(default_factory=SloConfig)
    tuner: TunerConfig = field(default_factory=TunerConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    quality: QualityConfig = field(default_factory=QualityConfig)


# --- loading --------------------------------------------------------------------------------------

def load_app_config(cfg: DictConfig | Mapping[str, Any]) -> AppConfig:
    """Validate a composed config into frozen dataclasses; errors name the dotted key."""
    data = _to_plain(cfg)
    traffic = data.pop("traffic", None)
    if traffic is None:
        raise TunerConfigError("traffic is not set: pass the request log, "
                               "e.g. `python -m tuner +traffic=logs.jsonl`")
    path = Path(str(traffic))
    _check(path.is_file(), "traffic", f"no such file: {path}")
    runtime = _engine_config(data.pop("runtime", {}))
    return _build(AppConfig, {**data, "traffic": path, "runtime": runtime}, prefix="")


def _to_plain(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(cfg, DictConfig):
        return copy.deepcopy(dict(cfg))
    if "hydra" in cfg:  # compose(return_hydra_config=True): Hydra's own node only resolves inside a run
        cfg = OmegaConf.masked_copy(cfg, [str(k) for k in cfg if k != "hydra"])
    try:  # resolves ${oc.env:...}; a missing value or variable names its key
        return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)  # type: ignore[return-value]
    except OmegaConfBaseException as e:
        first_line = str(e).splitlines()[0]
        raise TunerConfigError(f"{getattr(e, 'full_key', None) or 'config'}: {first_line}") from None


def _engine_config(section: Any) -> EngineConfig:
    try:
        return EngineConfig.from_mapping(section)
    except ConfigError as e:  # its keys are relative to the runtime section
        message = str(e)
        if message.startswith("unknown key "):  # "unknown key 'cache.x'" -> "unknown key 'runtime.cache.x'"
            raise TunerConfigError(re.sub(r"^unknown key '?", r"\g<0>runtime.", message)) from None
        raise TunerConfigError(f"runtime.{message}") from None


def _build(cls: type, data: Any, prefix: str) -> Any:
    """Frozen dataclass `cls` from a mapping; catches keys that Hydra's `+key=` lets through."""
    if isinstance(data, cls):
        return data
    _check(isinstance(data, Mapping), prefix.rstrip(".") or "config", f"expected a mapping, got {data!r}")
    hints = get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in data.items():
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TunerConfigError(f"unknown key '{prefix}{key}'{hint}")
        kwargs[key] = _coerce(hints[key], value, f"{prefix}{key}")
    return cls(**kwargs)


def _coerce(hint: Any, value: Any, key: str) -> Any:
    if get_origin(hint) in (Union, UnionType):
        if value is None:
            return None
        (hint,) = [a for a in get_args(hint) if a is not type(None)]
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, f"{key}.")
    if get_origin(hint) is None and isinstance(hint, type) and issubclass(hint, Enum):
        try:
            return hint(value)
        except ValueError:
            choices = [m.value for m in hint]
            raise TunerConfigError(f"{key}: expected one of {choices}, got {value!r}") from None
    if get_origin(hint) is dict and dataclasses.is_dataclass(get_args(hint)[1]):
        _check(isinstance(value, Mapping), key, f"expected a mapping, got {value!r}")
        return {k: _build(get_args(hint)[1], v, f"{key}.{k}.") for k, v in value.items()}
    expected = {bool: (bool,), int: (int,), float: (int, float), str: (str,), list: (list, tuple)}.get(
        get_origin(hint) or hint)
    is_bool_as_number = isinstance(value, bool) and hint is not bool
    _check(expected is None or (isinstance(value, expected) and not is_bool_as_number),
           key, f"expected {getattr(hint, '__name__', hint)}, got {value!r}")
    # A huge YAML integer would raise OverflowError in float().
    _check(hint is not float or not isinstance(value, int) or abs(value) <= sys.float_info.max, key,
           "too large for a float (|value| > 1.8e308)")
    return float(value) if hint is float else value


# The root of conf/config.yaml's defaults list; every group is typed through it.
ConfigStore.instance().store(name="pagetune_schema", node=hydra_schema(AppConfig))
