"""Where the engine runs and how big its pools are: device, dtypes, model, lengths, memory plan."""

from __future__ import annotations

from typing import NamedTuple

import torch

from runtime.config import ConfigError, EngineConfig
from runtime.kv.manager import TierSpec
from runtime.limits import engine_limits
from runtime.memory import (
    GIB,
    InsufficientMemoryError,
    MemoryPlan,
    cpu_device_bytes,
    estimate_activation_bytes,
    plan_memory,
)
from runtime.model.info import model_info
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


def _activation_bytes(config: EngineConfig, model: LlamaForCausalLM, budget: int, max_model_len: int,
                      device: torch.device, dtype: torch.dtype) -> int:
    if device.type != "cuda" or config.tensor_parallel_size > 1:  # a TP profile forward would wait on the ranks
        return estimate_activation_bytes(model.config, budget, config.scheduler.max_num_seqs, dtype.itemsize)
    from runtime.activations import profile_activation_bytes

    use_triton = config.kernel.attention_backend != "torch"
    return profile_activation_bytes(model, budget, config.scheduler.max_num_seqs, max_model_len,
                                    config.kernel, use_triton)


def _device_bytes(config: EngineConfig, device: torch.device) -> int:
    if config.cache.device_memory_gb is not None:
        return int(config.cache.device_memory_gb * GIB)
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        _check_free(total, config.cache.gpu_memory_utilization, device)
        return total
    return cpu_device_bytes()


def _check_free(total: int, utilization: float, device: torch.device) -> None:
    """The engine's share of the GPU must be free at start: memory other processes hold is not ours to plan."""
    free, _ = torch.cuda.mem_get_info(device)
    ours = torch.cuda.memory_reserved(device)  # weights already loaded, a previous engine's cached blocks
    others = total - free - ours
    if utilization * total > total - others:
        raise InsufficientMemoryError(
            f"cache.gpu_memory_utilization: {utilization:g} x {total / GIB:.1f} GiB = {utilization * total / GIB:.1f}"
            f" GiB is more than this process can have: {others / GIB:.1f} GiB of the GPU are held by other "
            f"processes. Lower cache.gpu_memory_utilization to {max(0.0, 1 - others / total) - 0.01:.2f} or less, "
            "or free the GPU.")


def plan_placement(config: EngineConfig, model: LlamaForCausalLM | None = None) -> Placement:
    device = resolve_device(config.device)
    dtype = resolve_dtype(config.model.dtype, device)
    kv_dtype = dtype if config.cache.kv_cache_dtype == "auto" else _DTYPES[config.cache.kv_cache_dtype]
    if model is None:
        model = load_model(config.model.name, dtype, device, config.model.seed)
    max_model_len, budget, tiers = engine_limits(config, model_info(config.model.name))
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    memory = plan_memory(
        device_bytes=_device_bytes(config, device), utilization=config.cache.gpu_memory_utilization,
        weight_bytes=weights, activation_bytes=_activation_bytes(config, model, budget, max_model_len, device, dtype),
        tiers=tiers, layout=model.layout, kv_dtype_bytes=kv_dtype.itemsize, swap_space_gb=config.cache.swap_space,
        num_blocks_override=config.cache.num_gpu_blocks_override)
    return Placement(device, dtype, kv_dtype, model, max_model_len, budget, memory, memory.tier_specs(tiers))
