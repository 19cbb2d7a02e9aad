"""Llama-family decoder (Llama 2/3, Mistral, Qwen2) on the paged KV cache.

Parameter names follow Hugging Face's (`model.layers.N.self_attn.o_proj.weight`, ...) except that
q/k/v and gate/up are fused into one projection each (`qkv_proj`, `gate_up_proj`): one GEMM instead
of three or two. `runtime.model.loader` splices the checkpoint's separate tensors into them.
The math of each block mirrors `transformers`' so greedy output is identical in fp32.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from kernels import apply_rotary, rms_norm, silu_and_mul
from kernels.norm import NormOutput
from runtime.attention import AttentionMetadata, KVCache, paged_attention
from runtime.model.linear import Linear
from runtime.model.rope import Rope, RotaryEmbedding

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2")


class QKV(NamedTuple):
    q: torch.Tensor  # [T, Hq, D], rotated
    k: torch.Tensor  # [T, Hkv, D], rotated
    v: torch.Tensor  # [T, Hkv, D]


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None, use_triton: bool,
                residual_out: torch.Tensor | None = None) -> NormOutput:
        """Normalise x + residual (x alone without one); also returns that sum, the new residual (written into
        `residual_out` when given: a CUDA-graph piece's static buffer, `residual` itself included).

        Same order of operations as transformers: add, normalise in fp32, cast, then scale.
        """
        return rms_norm(x, self.weight, self.eps, residual, use_triton=use_triton, residual_out=residual_out)


class Attention(nn.Module):
    def __init__(self, config, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.num_heads
        self.scale = self.head_dim**-0.5
        qkv_bias = config.model_type == "qwen2" or bool(getattr(config, "attention_bias", False))
        out_bias = config.model_type != "qwen2" and bool(getattr(config, "attention_bias", False))
        q_size, kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.split = (q_size, kv_size, kv_size)
        self.qkv_proj = Linear(config.hidden_size, sum(self.split), bias=qkv_bias)
        self.o_proj = Linear(q_size, config.hidden_size, bias=out_bias)

    def project(self, x: torch.Tensor, rope: Rope, use_triton: bool, out: torch.Tensor | None = None) -> QKV:
        """q, k (rotated, in one launch: the first Hq + Hkv heads of the fused projection) and v of x [T, H]:
        what the attention itself reads; views of `out` [T, (Hq + 2 Hkv) * D] when given (the Triton rotary
        works in place)."""
        t, heads, d = x.shape[0], self.num_heads + self.num_kv_heads, self.head_dim
        qkv = self.qkv_proj(x, out)  # [T, Hq*D | Hkv*D | Hkv*D]
        rows = qkv[:, : heads * d].view(t, heads, d)
        qk = apply_rotary(rows, *rope, use_triton=use_triton)
        if out is not None and qk is not rows:  # the torch reference returns a new tensor: the caller reads `out`
            qk = rows.copy_(qk)
        return QKV(qk[:, : self.num_heads], qk[:, self.num_heads :], qkv[:, heads * d :].view(t, self.num_kv_heads, d))

    def attend(self, qkv: QKV, meta: AttentionMetadata, kv_caches: list[KVCache],
               out: torch.Tensor | None = None) -> torch.Tensor:
        """The paged attention of this layer (K/V written, then attended): [T, Hq, D], into `out` if given."""
        return paged_attention(*qkv, self.layer_idx, self.scale, meta, kv_caches, out=out)

    def forward(self, x: torch.Tensor, rope: Rope, meta: AttentionMetadata,
                kv_caches: list[KVCache]) -> torch.Tensor:
        out = self.attend(self.project(x, rope, meta.use_triton), meta, kv_caches)  # [T, Hq, D]
        return self.o_proj(out.reshape(x.shape[0], -1))


class MLP(nn.Module):
    def __init__(self, config) -> None:
        super().__init__()
        bias = bool(getattr(config, "mlp_bias", False))
        self.intermediate = config.intermediate_size
        self.gate_up_proj = Linear(config.hidden_size, 2 * self.intermediate, bias=bias)
        self.down_proj = Linear(self.intermediate, config.hidden_size, bias=bias)

    def forward(self, x: torch.Tensor, use_triton: bool) -> torch.Tensor:
        return self.down_proj(silu_and_mul(self.gate_up_proj(x), use_triton=use_triton))


class DecoderLayer(nn.Module):
    def __init__(self, config, layer_idx: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config, layer_idx)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(self, h: torch.Tensor, residual: torch.Tensor | None, rope, meta: AttentionMetadata,
                kv_caches: list[KVCache]) -> tuple[torch.Tensor, torch.Tensor]:
        """h: the previous sublayer's output, not yet added to `residual` (None before the first layer).

        Returns this layer's MLP output and the residual stream before it; each residual add is fused
        into the RMSNorm that follows it.
        """
        x, residual = self.input_layernorm(h, residual, meta.use_triton)
        h = self.self_attn(x, rope, meta, kv_caches)
        return self.after_attention(h, residual, meta.use_triton)

    def before_attention(self, h: torch.Tensor, residual: torch.Tensor | None, rope, use_triton: bool, *,
                         qkv_out: torch.Tensor | None = None,
                         residual_out: torch.Tensor | None = None) -> tuple[QKV, torch.Tensor]:
        """The layer up to its attention (a CUDA-graph piece): (q, k, v) and the residual stream, written into
        `qkv_out` and `residual_out` when given (see `Attention.project`, `RMSNorm.forward`)."""
        x, residual = self.input_layernorm(h, residual, use_triton, residual_out)
        return self.self_attn.project(x, rope, use_triton, qkv_out), residual

    def after_attention(self, h: torch.Tensor, residual: torch.Tensor, use_triton: bool,
                        residual_out: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer after its attention's output projection: the MLP's output and the residual before it
        (written into `residual_out` when given)."""
        x, residual = self.post_attention_layernorm(h, residual, use_triton, residual_out)
        return self.mlp(x, use_triton), residual


class Backbone(nn.Module):
    def __init__(self, config) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class LlamaForCausalLM(nn.Module):
    """`forward` runs the flat batch of this step's tokens; `compute_logits` only the rows to sample."""

    def __init__(self, config) -> None:
        super().__init__()
        if config.model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(f"model_type {config.model_type!r} is not supported; use one of {SUPPORTED_MODEL_TYPES}")
        self.config = config
        self.model = Backbone(config)
        self.lm_head = Linear(config.hidden_size, config.vocab_size, bias=False)
        if getattr(config, "tie_word_embeddings", False):
            self.lm_head.weight = self.model.embed_tokens.weight
        self.rotary = RotaryEmbedding(config)

    @property
    def layout(self) -> tuple[int, int, int]:
        """(num_layers, num_kv_heads, head_dim): the KV cache shape this model needs."""
        attn = self.model.layers[0].self_attn
        return len(self.model.layers), attn.num_kv_heads, attn.head_dim

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
                kv_caches: list[KVCache]) -> torch.Tensor:
        h = self.model.embed_tokens(input_ids)  # [T, H]
        rope = self.rotary(positions, h.dtype)
        residual = None
        for layer in self.model.layers:
            h, residual = layer(h, residual, rope, meta, kv_caches)
        return self.model.norm(h, residual, meta.use_triton).normed

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()  # [N, V]
