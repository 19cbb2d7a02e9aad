"""pagetune's paged-attention inference runtime (usable on its own, vLLM-shaped offline API).

This package's names are the runtime's whole public surface; tools built on it (the tuner) import
nothing else. Configuration, model info, limits, the engine loop and the simulator load without torch,
so a process that only plans or simulates (the tuner's parent) never imports it; what touches tensors
loads on first use (PEP 562), and an engine on a model imports torch when it is built.

    torch-free   EngineConfig, BlockTier, ConfigError, NUMERICS_NEUTRAL   the config and its rules
                 build_config                                              the one validator of frozen configs
                 ModelInfo, model_info, ModelLoadError                      a model's shape and limits
                 has_tokenizer                                             whether a model brings a tokenizer
                 EngineLimits, engine_limits                               max_model_len, token budget, tiers
                 check_tensor_parallel                                     a tensor-parallel degree the model takes
                 GpuProfile, load_profile, sim_engine, sim_memory,         the simulator (runtime.sim): a GPU
                 VirtualClock, StepTimeModel, StepSample, StepShaper,      profile, an engine on its step times,
                 fit, fit_error, Refit, refit_profile, StepRow, HostModel  a step's shape, the fit and refit
                 SIM_UNMODELLED                                            fields the step-time model cannot see
                 StepLog                                                   a real engine's steps, timed
                 LLMEngine, SamplingParams, RequestOutputKind, RequestOutput, CompletionOutput,
                 RequestMetrics, StepStats, StepTotals                     the engine and its outputs
                 InsufficientMemoryError                                    the KV pool cannot hold a request
                 freeze_startup_heap, frozen_heap, CollectorPauses         the startup heap unwalked; collection pauses
    with torch   LLM                                                        the offline API on a model
                 WeightCache                                                weights kept across engines
                 DeviceInfo, describe_device, peak_memory_gb, reset_peak_memory
                 load_tokenizer, encode_chat, NoTokenizerError             the model's tokenizer and chat template
                 sampling_probs                                             the distribution a sampler path draws from
"""

from __future__ import annotations

from typing import Any

from runtime.config import NUMERICS_NEUTRAL, BlockTier, ConfigError, EngineConfig
from runtime.engine import LLMEngine
from runtime.heap import CollectorPauses, freeze_startup_heap, frozen_heap
from runtime.limits import EngineLimits, check_tensor_parallel, engine_limits
from runtime.memory import InsufficientMemoryError
from runtime.model.info import ModelInfo, ModelLoadError, model_info
from runtime.model.source import has_tokenizer
from runtime.outputs import CompletionOutput, RequestMetrics, RequestOutput
from runtime.sampling_params import RequestOutputKind, SamplingParams
from runtime.sim import UNMODELLED as SIM_UNMODELLED
from runtime.sim import (
    GpuProfile,
    HostModel,
    Refit,
    StepRow,
    StepSample,
    StepShaper,
    StepTimeModel,
    VirtualClock,
    fit,
    fit_error,
    load_profile,
    refit_profile,
    save_profile,
    sim_engine,
    sim_memory,
)
from runtime.stats import StepStats, StepTotals
from runtime.step_log import StepLog
from runtime.typed import build as build_config

_LAZY = ("LLM", "WeightCache", "DeviceInfo", "describe_device", "peak_memory_gb", "reset_peak_memory",
         "load_tokenizer", "encode_chat", "NoTokenizerError", "sampling_probs")

__all__ = ["NUMERICS_NEUTRAL", "BlockTier", "ConfigError", "EngineConfig", "EngineLimits", "GpuProfile", "ModelInfo",
           "HostModel", "Refit", "ModelLoadError", "SIM_UNMODELLED", "StepLog", "StepRow", "StepSample", "StepShaper",
           "StepTimeModel", "VirtualClock", "build_config", "check_tensor_parallel", "engine_limits", "fit",
           "fit_error", "has_tokenizer", "load_profile", "model_info", "refit_profile", "save_profile", "sim_engine",
           "sim_memory", "LLMEngine", "CollectorPauses", "freeze_startup_heap", "frozen_heap",
           "SamplingParams", "RequestOutputKind",
           "RequestOutput", "CompletionOutput", "RequestMetrics", "StepStats", "StepTotals", "InsufficientMemoryError",
           *_LAZY]


def _engine_names() -> dict[str, Any]:
    """Everything that needs torch, imported on first use of any of it."""
    from runtime.device import DeviceInfo, describe_device, peak_memory_gb, reset_peak_memory
    from runtime.llm import LLM
    from runtime.model.tokenizer import NoTokenizerError, encode_chat, load_tokenizer
    from runtime.sampler import sampling_probs
    from runtime.weights import WeightCache

    return {"LLM": LLM, "WeightCache": WeightCache, "DeviceInfo": DeviceInfo, "describe_device": describe_device,
            "peak_memory_gb": peak_memory_gb, "reset_peak_memory": reset_peak_memory,
            "load_tokenizer": load_tokenizer, "encode_chat": encode_chat, "NoTokenizerError": NoTokenizerError,
            "sampling_probs": sampling_probs}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'runtime' has no attribute {name!r}")
    globals().update(_engine_names())  # later lookups skip this function
    return globals()[name]


def __dir__() -> list[str]:
    return sorted(__all__)
