"""Rotary position embedding tables (cos, sin per position), with transformers' own inverse-frequency
functions for scaled RoPE. Applying them to q and k is `kernels.apply_rotary`, which reads a token's row at
its position: a step computes no angle (before, each step's cos/sin took nine small kernels, and a CUDA-graph
piece recomputed them). Each row is computed as transformers computes it for that position, so the values
are the same."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn


class Rope(NamedTuple):
    """What a step's rotary embedding reads: the tables of every position, and the step's positions."""

    cos: torch.Tensor  # [P, D]
    sin: torch.Tensor  # [P, D]
    positions: torch.Tensor  # [T] int64, each < P


def _inv_freq(config) -> tuple[torch.Tensor, float]:
    params = getattr(config, "rope_parameters", None) or {}
    rope_type = params.get("rope_type", "default")
    if rope_type != "default":
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

        return ROPE_INIT_FUNCTIONS[rope_type](config, None)
    base = params.get("rope_theta", getattr(config, "rope_theta", 10000.0))
    dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim)), 1.0


class RotaryEmbedding(nn.Module):
    def __init__(self, config) -> None:
        super().__init__()
        inv_freq, self.scaling = _inv_freq(config)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.max_positions = config.max_position_embeddings  # max_model_len never exceeds it (runtime.limits)
        self._tables: dict[torch.dtype, tuple[torch.Tensor, torch.Tensor]] = {}

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> Rope:
        return Rope(*self.tables(dtype), positions)

    def tables(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [max_positions, D], built on first use (before any CUDA-graph capture: the warm-up
        forward runs first). Elementwise the same as transformers: fp32 angle, cos/sin, scale, cast."""
        if dtype not in self._tables:
            positions = torch.arange(self.max_positions, device=self.inv_freq.device)
            freqs = positions[:, None].float() * self.inv_freq.float()  # [P, D/2]
            emb = torch.cat((freqs, freqs), dim=-1)  # [P, D]
            self._tables[dtype] = ((emb.cos() * self.scaling).to(dtype), (emb.sin() * self.scaling).to(dtype))
        return self._tables[dtype]
