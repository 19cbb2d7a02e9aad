"""Rotary position embedding tables (cos, sin per position), with transformers' own inverse-frequency
functions for scaled RoPE. Applying them to q and k is `kernels.apply_rotary`."""

from __future__ import annotations

import torch
from torch import nn


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

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        # Elementwise the same as transformers: fp32 angle, cos/sin, scale, cast.
        freqs = positions[:, None].float() * self.inv_freq.float()  # [T, D/2]
        emb = torch.cat((freqs, freqs), dim=-1)  # [T, D]
        return (emb.cos() * self.scaling).to(dtype), (emb.sin() * self.scaling).to(dtype)
