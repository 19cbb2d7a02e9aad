"""Attention over the paged KV cache: per-step metadata and the layer-level call into `kernels`.

A step's flat token batch is laid out by tier, and within a tier decodes before prefill chunks,
so each part is one contiguous slice and one kernel launch (the block size is a compile-time
constant of the kernels):

    tokens: | tier 0 decodes | tier 0 prefill chunks | tier 1 decodes | tier 1 prefill | pad |
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels import decode_attention, prefill_attention, write_kv
from kernels.prefill_plan import PrefillPlan
from runtime.config import KernelConfig


@dataclass(frozen=True)
class KVCache:
    """One tier's cache for every layer: k, v are [num_layers, num_blocks, block_size, Hkv, D]."""

    k: torch.Tensor
    v: torch.Tensor

    @property
    def block_size(self) -> int:
        return self.k.shape[2]


@dataclass(frozen=True)
class DecodeBatch:
    tokens: slice  # rows of the flat batch, one token per sequence
    block_tables: torch.Tensor  # [B, max_blocks] int32
    context_lens: torch.Tensor  # [B] int32, including the new token
    max_context: int | None = None  # the tier's longest context (`TierSpec.max_context`): sizes split-KV


@dataclass(frozen=True)
class PrefillBatch:
    tokens: slice  # rows of the flat batch
    block_tables: torch.Tensor  # [B, max_blocks] int32
    query_start_loc: torch.Tensor  # [B + 1] int32, offsets into `tokens`
    context_lens: torch.Tensor  # [B] int32, cached prefix + this chunk
    plan: PrefillPlan | None = None  # the chunks' paths (flash or short), built once a step for every layer


@dataclass(frozen=True)
class TierBatch:
    tier: int
    tokens: slice  # all rows of this tier (decode then prefill)
    slot_mapping: torch.Tensor  # [len(tokens)] int64: block_id * block_size + offset
    decode: DecodeBatch | None
    prefill: PrefillBatch | None


@dataclass(frozen=True)
class AttentionMetadata:
    tiers: tuple[TierBatch, ...]
    use_triton: bool
    qk_clip: float | None
    flash_min_len: int
    split_kv_min_len: int
    prefill_kernel: str = "triton"  # the flash path's kernel (`kernel.prefill_kernel`)

    @classmethod
    def of(cls, tiers: tuple[TierBatch, ...], use_triton: bool, kernel: KernelConfig) -> AttentionMetadata:
        """A step's metadata: its tiers, and the kernel settings every attention call of it reads."""
        return cls(tiers, use_triton, kernel.qk_clip, kernel.flash_min_len, kernel.split_kv_min_len,
                   kernel.prefill_kernel)


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int, scale: float,
                    meta: AttentionMetadata, kv_caches: list[KVCache], out: torch.Tensor | None = None) -> torch.Tensor:
    """Write this step's K/V into the cache, then attend; q: [T, Hq, D], k/v: [T, Hkv, D] -> [T, Hq, D], written
    into `out` when given (a CUDA-graph piece's static input)."""
    # Rows past the last tier are padding (pad_multiple, a graph's bucket): zero them; every other row is
    # written below.
    end = meta.tiers[-1].tokens.stop if meta.tiers else 0
    if out is None:
        out = torch.empty_like(q) if end == q.shape[0] else torch.zeros_like(q)
    elif end < q.shape[0]:
        out[end:].zero_()
    for tb in meta.tiers:
        k_cache, v_cache = kv_caches[tb.tier].k[layer], kv_caches[tb.tier].v[layer]
        write_kv(k[tb.tokens], v[tb.tokens], k_cache, v_cache, tb.slot_mapping, use_triton=meta.use_triton)
        if tb.decode is not None:
            d = tb.decode
            decode_attention(
                q[d.tokens], k_cache, v_cache, d.block_tables, d.context_lens, scale=scale,
                qk_clip=meta.qk_clip, split_kv_min_len=meta.split_kv_min_len, use_triton=meta.use_triton,
                max_context=d.max_context, out=out[d.tokens])
        if tb.prefill is not None:
            p = tb.prefill
            prefill_attention(
                q[p.tokens], k_cache, v_cache, p.block_tables, p.query_start_loc, p.context_lens, scale=scale,
                qk_clip=meta.qk_clip, flash_min_len=meta.flash_min_len, use_triton=meta.use_triton, plan=p.plan,
                out=out[p.tokens], kernel=meta.prefill_kernel)
    return out
