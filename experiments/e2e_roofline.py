"""Ceilings and the roofline bound for bench_e2e (measured in the same run)."""

from __future__ import annotations

import torch

from experiments.timing import copy_ceiling_tbs, time_ms
from runtime.model.presets import preset_config


def ceilings() -> tuple[float, float]:
    """(bf16 GEMM FLOP/s on random 8192^3, device copy bytes/s read + written)."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    ms = time_ms(lambda: a @ b, graph=False)
    gemm = 2 * 8192**3 / (ms / 1e3)
    return gemm, copy_ceiling_tbs() * 1e12


def _shape(model: str) -> tuple[int, int, int, int, int]:
    c = preset_config(model)
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    h, i, layers, v = c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.vocab_size
    per_layer = h * (c.num_attention_heads + 2 * c.num_key_value_heads) * head_dim + c.num_attention_heads * \
        head_dim * h + 3 * h * i
    return layers * per_layer + h * v, layers, c.num_attention_heads, c.num_key_value_heads, head_dim


def roofline_seconds(model: str, prompts: list[list[int]], outs: list[int], gemm: float, copy: float) -> float:
    """Prefill FLOPs at the GEMM rate plus, for every decode step, weights + live KV read at the copy rate.

    All requests decode together (continuous batching), so step t reads the KV of every request that
    still has more than t tokens to produce. The copy rate counts bytes read + written, the rate at which
    HBM moves bytes: reading B bytes is bounded by B / copy.
    """
    params, layers, heads, kv_heads, head_dim = _shape(model)
    flops = sum(2 * params * len(p) + 2 * layers * heads * head_dim * len(p) ** 2 for p in prompts)
    kv_per_token = 2 * layers * kv_heads * head_dim * 2  # bf16 K and V
    read = 0
    for t in range(max(outs)):
        live = [len(p) + t for p, o in zip(prompts, outs) if o > t]
        read += 2 * params + kv_per_token * sum(live)  # bf16 weights + KV
    return flops / gemm + read / copy


def static_kv_waste(prompts: list[list[int]], outs: list[int], batch: int) -> float:
    """Share of a static batch's contiguous KV preallocation (batch x (longest prompt + longest output))
    that never holds a token."""
    allocated = used = 0
    for b in range(0, len(prompts), batch):
        ps, os_ = prompts[b : b + batch], outs[b : b + batch]
        allocated += len(ps) * (max(len(p) for p in ps) + max(os_))
        used += sum(len(p) + o for p, o in zip(ps, os_))
    return 1 - used / allocated
