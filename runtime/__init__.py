"""pagetune's paged-attention inference runtime (usable on its own, vLLM-shaped offline API).

This package's names are the runtime's whole public surface; tools built on it (the tuner) import
nothing else. Configuration, model info and limits load without torch, so a process that only plans
(the tuner's parent) never imports it; the engine and everything that touches tensors load on first
use (PEP 562).

    torch-free   EngineConfig, BlockTier, ConfigError, NUMERICS_NEUTRAL   the config and its rules
                 build_config                                              the one validator of frozen configs
                 ModelInfo, model_info, ModelLoadError                      a model's shape and limits
                 has_tokenizer                                             whether a model brings a tokenizer
                 EngineLimits, engine_limits                               max_model_len, token budget, tiers
    with torch   LLM, LLMEngine, SamplingParams, RequestOutputKind, RequestOutput, CompletionOutput,
                 RequestMetrics, StepStats, StepTotals                     the engine and its outputs
                 WeightCache                                                weights kept across engines
                 DeviceInfo, describe_device, peak_memory_gb, reset_peak_memory
                 InsufficientMemoryError                                    the KV pool cannot hold a request
                 load_tokenizer, encode_chat, NoTokenizerError             the model's tokenizer and chat template
                 sampling_probs                                             the distribution a sampler path draws from
"""

from __future__ import annotations

from typing import Any

from runtime.config import NUMERICS_NEUTRAL, BlockTier, ConfigError, EngineConfig
from runtime.limits import EngineLimits, engine_limits
from runtime.model.info import ModelInfo, ModelLoadError, model_info
from runtime.model.source import has_tokenizer
from runtime.typed import build as build_config

_LAZY = ("LLM", "LLMEngine", "SamplingParams", "RequestOutputKind", "RequestOutput", "CompletionOutput",
         "RequestMetrics", "StepStats", "StepTotals", "WeightCache", "DeviceInfo", "describe_device",
         "peak_memory_gb", "reset_peak_memory", "InsufficientMemoryError", "load_tokenizer", "encode_chat",
         "NoTokenizerError", "sampling_probs")

__all__ = ["NUMERICS_NEUTRAL", "BlockTier", "ConfigError", "EngineConfig", "EngineLimits", "ModelInfo",
           "ModelLoadError", "build_config", "engine_limits", "has_tokenizer", "model_info", *_LAZY]


def _engine_names() -> dict[str, Any]:
    """Everything that needs torch, imported on first use of any of it."""
    from runtime.device import DeviceInfo, describe_device, peak_memory_gb, reset_peak_memory
    from runtime.engine import LLMEngine
    from runtime.llm import LLM
    from runtime.memory import InsufficientMemoryError
    from runtime.model.tokenizer import NoTokenizerError, encode_chat, load_tokenizer
    from runtime.outputs import CompletionOutput, RequestMetrics, RequestOutput
    from runtime.sampler import sampling_probs
    from runtime.sampling_params import RequestOutputKind, SamplingParams
    from runtime.stats import StepStats, StepTotals
    from runtime.weights import WeightCache

    return {"LLM": LLM, "LLMEngine": LLMEngine, "SamplingParams": SamplingParams,
            "RequestOutputKind": RequestOutputKind, "RequestOutput": RequestOutput,
            "CompletionOutput": CompletionOutput, "RequestMetrics": RequestMetrics, "StepStats": StepStats,
            "StepTotals": StepTotals, "WeightCache": WeightCache, "DeviceInfo": DeviceInfo,
            "describe_device": describe_device, "peak_memory_gb": peak_memory_gb,
            "reset_peak_memory": reset_peak_memory, "InsufficientMemoryError": InsufficientMemoryError,
            "load_tokenizer": load_tokenizer, "encode_chat": encode_chat, "NoTokenizerError": NoTokenizerError,
            "sampling_probs": sampling_probs}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'runtime' has no attribute {name!r}")
    globals().update(_engine_names())  # later lookups skip this function
    return globals()[name]


def __dir__() -> list[str]:
    return sorted(__all__)
