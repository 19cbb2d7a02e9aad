"""The tuner's configuration: one frozen dataclass per `conf/` group, and its Hydra schema.

Each section is declared once (`sections`), as a frozen dataclass with a comment on every field; its
`__post_init__` checks values with messages that name the dotted key. These dataclasses (and the
runtime's `EngineConfig`) hold every default: `conf/` holds only overrides and presets. Hydra needs
mutable dataclasses, so `hydra_schema` derives a mutable twin of each (same fields, types, defaults)
and the tree is registered in the ConfigStore as `pagetune_schema` (`tuner.schema`): an unknown or
mistyped key fails at compose with Hydra's message naming the key. `load_app_config` turns the
composed DictConfig into these frozen dataclasses with the runtime's one validator (`runtime.typed`).

Nothing instantiates a class named by configuration: samplers, pruners and storages are built from
enum names by fixed tables (`tuner.search.samplers`, `tuner.store.storage`).

    names      the config tree, the default profile, the enums, TunerConfigError and its check
    sections   one frozen dataclass per conf/ group
    app        AppConfig (and its Measuring view), load_app_config, the schema registered with Hydra
"""

from __future__ import annotations

from tuner.config.app import AppConfig, Measuring, load_app_config, traffic_stem
from tuner.config.names import (
    CONF_DIR,
    DEFAULT_PROFILE,
    BaselineName,
    LongPrompts,
    ObjectiveName,
    OnError,
    PrunerName,
    ResumeMode,
    SamplerName,
    StorageBackend,
    TrafficFormat,
    TunerConfigError,
)
from tuner.config.sections import (
    ExecutorConfig,
    ParamConfig,
    QualityConfig,
    ReplayConfig,
    SearchConfig,
    SloConfig,
    StorageConfig,
    TrackingConfig,
    TunerConfig,
    ValidationConfig,
    VllmExecutorConfig,
    WhenConfig,
)

__all__ = [
    "CONF_DIR", "DEFAULT_PROFILE", "AppConfig", "BaselineName",
    "ExecutorConfig", "LongPrompts", "Measuring", "ObjectiveName", "OnError", "ParamConfig",
    "PrunerName", "QualityConfig", "ReplayConfig", "ResumeMode", "SamplerName", "SearchConfig", "SloConfig",
    "StorageBackend", "StorageConfig", "TrackingConfig", "TrafficFormat", "TunerConfig", "TunerConfigError",
    "ValidationConfig", "VllmExecutorConfig", "WhenConfig", "load_app_config", "traffic_stem",
]
