"""pagetune's paged-attention inference runtime (usable on its own, vLLM-shaped offline API).

This package's names are the runtime's whole public surface; tools built on it (the tuner) import
nothing else. Configuration, model info and limits load without torch, so a process that only plans
(the tuner's parent) never imports it; the engine and everything that touches tensors load on first
use (PEP 562).

    torch-free   EngineConfig, BlockTier, ConfigError, NUMERICS_NEUTRAL   the config and its rules
                 build_config                                              the one validator of frozen configs
                 ModelInfo, model_info, ModelLoadError                      a model's shape and limits
                 EngineLimits, engine_limits                               max_model_len, token budget, tiers
    with torch   LLM, LLMEngine, SamplingParams, RequestOutputKind, RequestOutput, CompletionOutput,
                 RequestMetrics, StepStats, StepTotals                     the engine and its outputs
                 WeightCache                                                weights kept across engines
                 DeviceInfo, describe_device, peak_memory_gb, reset_peak_memory
                 InsufficientMemoryError                                    the KV pool cannot hold a request
"""

from __future__ import annotations

import importlib
from typing import Any

from runtime.config import NUMERICS_NEUTRAL, BlockTier, ConfigError, EngineConfig
from runtime.limits import EngineLimits, engine_limits
from runtime.model.info import ModelInfo, ModelLoadError, model_info
from runtime.typed import build as build_config

_LAZY = {
    "LLM": "runtime.llm",
    "LLMEngine": "runtime.engine",
    "SamplingParams": "runtime.sampling_params",
    "RequestOutputKind": "runtime.sampling_params",
    "RequestOutput": "runtime.outputs",
    "CompletionOutput": "runtime.outputs",
    "RequestMetrics": "runtime.outputs",
    "StepStats": "runtime.stats",
    "StepTotals": "runtime.stats",
    "WeightCache": "runtime.weights",
    "DeviceInfo": "runtime.device",
    "describe_device": "runtime.device",
    "peak_memory_gb": "runtime.device",
    "reset_peak_memory": "runtime.device",
    "InsufficientMemoryError": "runtime.memory",
}

__all__ = ["NUMERICS_NEUTRAL", "BlockTier", "ConfigError", "EngineConfig", "EngineLimits", "ModelInfo",
           "ModelLoadError", "build_config", "engine_limits", "model_info", *_LAZY]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
