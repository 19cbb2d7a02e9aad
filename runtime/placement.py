"""Where the engine runs and how big its pools are: device, dtypes, model, lengths, memory plan."""

from __future__ import annotations

from typing import NamedTuple

import torch

from runtime.config import ConfigError, EngineConfig
from runtime.kv.manager import TierSpec
from runtime.memory import (
    CPU_DEFAULT_MEMORY_GB,
    GIB,
    MemoryPlan,
    estimate_activation_bytes,
    plan_memory,
)
from runtime.model.llama import LlamaForCausalLM
from runtime.model.loader import load_model

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
           "fp8_e4m3": torch.float8_e4m3fn}


class Placement(NamedTuple):
    device: torch.device
    dtype: torch.dtype
    kv_dtype: torch.dtype
    model: LlamaForCausalLM
    max_model_len: int
    max_num_batched_tokens: int
    memory: MemoryPlan
    tiers: tuple[TierSpec, ...]


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device: cuda was asked for but torch sees no CUDA device")
    return device


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return _DTYPES[name]


def _sliding_window(hf_config) -> int | None:
    """The attention window when the model uses one (Mistral v0.1; Qwen2 only with use_sliding_window)."""
    window = getattr(hf_config, "sliding_window", None)
    active = getattr(hf_config, "use_sliding_window", hf_config.model_type == "mistral")
    return window if window and active else None


def resolve_max_model_len(config: EngineConfig, hf_config) -> int:
    """The model's limit, or the configured one. Sliding-window attention is not implemented: within the
    window it equals full attention, so a windowed model is capped at its window, exactly."""
    window = _sliding_window(hf_config)
    limit = min(hf_config.max_position_embeddings, window or hf_config.max_position_embeddings)
    wanted = config.scheduler.max_model_len or limit
    if wanted > limit:
        why = f"sliding window ({window})" if window and window < hf_config.max_position_embeddings else \
            f"max_position_embeddings ({limit})"
        raise ConfigError(f"scheduler.max_model_len ({wanted}) exceeds the model's {why}")
    return wanted


def resolve_budget(config: EngineConfig, max_model_len: int) -> int:
    """The per-step token budget; without chunked prefill it must hold a whole prompt."""
    sched = config.scheduler
    budget = sched.max_num_batched_tokens or (2048 if sched.enable_chunked_prefill else max_model_len)
    if not sched.enable_chunked_prefill and budget < max_model_len:
        raise ConfigError(
            f"scheduler.max_num_batched_tokens ({budget}) must be >= max_model_len ({max_model_len}) "
            "when scheduler.enable_chunked_prefill is false")
    return budget


def _activation_bytes(config: EngineConfig, model: LlamaForCausalLM, budget: int, max_model_len: int,
                      device: torch.device, dtype: torch.dtype) -> int:
    if device.type != "cuda":
        return estimate_activation_bytes(model.config, budget, config.scheduler.max_num_seqs, dtype)
    from runtime.profile import profile_activation_bytes

    use_triton = config.kernel.attention_backend != "torch"
    return profile_activation_bytes(model, budget, config.scheduler.max_num_seqs, max_model_len,
                                    config.kernel, use_triton)


def _device_bytes(config: EngineConfig, device: torch.device) -> int:
    if config.cache.device_memory_gb is not None:
        return int(config.cache.device_memory_gb * GIB)
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return int(CPU_DEFAULT_MEMORY_GB * GIB)


def plan_placement(config: EngineConfig, model: LlamaForCausalLM | None = None) -> Placement:
    device = resolve_device(config.device)
    dtype = resolve_dtype(config.model.dtype, device)
    kv_dtype = dtype if config.cache.kv_cache_dtype == "auto" else _DTYPES[config.cache.kv_cache_dtype]
    if model is None:
        model = load_model(config.model.name, dtype, device, config.model.seed)
    max_model_len = resolve_max_model_len(config, model.config)
    budget = resolve_budget(config, max_model_len)
    tiers = config.cache.tiers(max_model_len)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    memory = plan_memory(
        device_bytes=_device_bytes(config, device), utilization=config.cache.gpu_memory_utilization,
        weight_bytes=weights, activation_bytes=_activation_bytes(config, model, budget, max_model_len, device, dtype),
        tiers=tiers, layout=model.layout, kv_dtype=kv_dtype, swap_space_gb=config.cache.swap_space,
        num_blocks_override=config.cache.num_gpu_blocks_override)
    specs = tuple(TierSpec(t.max_len, t.block_size, n, c)
                  for t, n, c in zip(tiers, memory.num_blocks, memory.num_cpu_blocks))
    return Placement(device, dtype, kv_dtype, model, max_model_len, budget, memory, specs)
