"""`AppConfig`, everything `python -m tuner` runs with, its `Measuring` view, and `load_app_config`: the composed
DictConfig validated into the frozen dataclasses (the schema registered with Hydra as `pagetune_schema`)."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from runtime import ConfigError, EngineConfig, build_config
from tuner.config.names import BaselineName, TrafficFormat, TunerConfigError, check
from tuner.config.sections import (
    ExecutorConfig,
    QualityConfig,
    ReplayConfig,
    SearchConfig,
    SloConfig,
    StorageConfig,
    TrackingConfig,
    TunerConfig,
    ValidationConfig,
)
from tuner.schema import hydra_schema

__all__ = ["AppConfig", "Measuring", "load_app_config", "traffic_stem"]


@dataclass(frozen=True)
class AppConfig:
    """Everything `python -m tuner` runs with, validated."""

    traffic: Path  # the recorded request log (`+traffic=PATH` or `traffic=PATH`)
    traffic_format: TrafficFormat = TrafficFormat.auto  # auto: detected from content
    baseline: BaselineName = BaselineName.vllm  # vllm: `vllm serve`'s defaults on this device | runtime
    runtime: EngineConfig = field(default_factory=EngineConfig)  # the engine config trials start from
    search: SearchConfig = field(default_factory=SearchConfig)
    slo: SloConfig = field(default_factory=SloConfig)
    tuner: TunerConfig = field(default_factory=TunerConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    quality: QualityConfig = field(default_factory=QualityConfig)
    executor: ExecutorConfig = field(default_factory=ExecutorConfig)
    # GPUs of the deployment: with more than one, the search picks its shape, runtime.tensor_parallel_size GPUs a
    # replica and devices / that many replicas behind a least-outstanding-requests balancer (tuner/deployment/);
    # a capacity is the whole deployment's. Simulated only for now (executor=sim).
    devices: int = 1

    def __post_init__(self) -> None:
        check(self.devices >= 1, "devices", f"must be >= 1, got {self.devices}")
        check(self.devices % self.runtime.tensor_parallel_size == 0, "runtime.tensor_parallel_size",
              f"{self.runtime.tensor_parallel_size} does not divide devices ({self.devices})")
        check(self.replay.target is None or self.tuner.n_trials == 1, "tuner.n_trials",
               f"replay.target measures the server's own config, once: set tuner.n_trials=1, got {self.tuner.n_trials}")

    @property
    def measuring(self) -> Measuring:
        """What the measuring phases read (the search's trials, the conclusion's re-measurements, an endpoint)."""
        return Measuring(self.tuner, self.slo, self.replay.min_window_s)


@dataclass(frozen=True)
class Measuring:
    """How this study measures, as the phases after the edge take it (not the whole config): the tuner's
    settings, the SLO, and the shortest span a capacity must hold (`tuner.measure.plan.plan_for`)."""

    tuner: TunerConfig
    slo: SloConfig
    min_window_s: float  # replay.min_window_s


# --- loading --------------------------------------------------------------------------------------

def load_app_config(cfg: DictConfig | Mapping[str, Any]) -> AppConfig:
    """Validate a composed config into frozen dataclasses; errors name the dotted key."""
    data = _to_plain(cfg)
    traffic = data.pop("traffic", None)
    if traffic is None:
        raise TunerConfigError("traffic is not set: pass the request log, "
                               "e.g. `python -m tuner +traffic=logs.jsonl`")
    path = Path(str(traffic))
    check(path.is_file(), "traffic", f"no such file: {path}")
    runtime = _engine_config(data.pop("runtime", {}))
    return build_config(AppConfig, {**data, "traffic": path, "runtime": runtime}, TunerConfigError)


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


def traffic_stem(path: str | Path) -> str:
    """The traffic file's name without its suffixes (`logs.jsonl.gz` -> `logs`): the default study name's start."""
    return Path(str(path)).name.split(".")[0] or "traffic"


# The root of conf/config.yaml's defaults list; every group is typed through it.
ConfigStore.instance().store(name="pagetune_schema", node=hydra_schema(AppConfig))
