"""pagetune's paged-attention inference runtime (usable on its own, vLLM-shaped offline API)."""

from __future__ import annotations

from runtime.config import BlockTier, ConfigError, EngineConfig
from runtime.engine import LLMEngine, StepStats
from runtime.llm import LLM
from runtime.outputs import CompletionOutput, RequestMetrics, RequestOutput
from runtime.sampling_params import RequestOutputKind, SamplingParams

__all__ = [
    "LLM",
    "BlockTier",
    "CompletionOutput",
    "ConfigError",
    "EngineConfig",
    "LLMEngine",
    "RequestMetrics",
    "RequestOutput",
    "RequestOutputKind",
    "SamplingParams",
    "StepStats",
]
