"""The online-softmax step that both paged attention kernels (decode and prefill) run per key tile.

Scores are in base 2 (the caller folds log2(e) into `scale_log2` and `clip_log2`). For query rows
M and a tile of N key positions:

    s = clip(q @ k^T * scale_log2), masked to -inf where not `keep`
    m' = max(m, rowmax(s));  l' = l * 2^(m - m') + rowsum(2^(s - m'));  acc' = acc * 2^(m - m') + 2^(s - m') @ v

Decorated with `triton.jit` at import (a helper a kernel calls must already be a JIT function);
the kernels themselves are jitted on first use (`kernels._triton.kernel_for`).
"""

from __future__ import annotations

import torch

from kernels._triton import tl, triton


def _attend_tile(
    q, k_ptrs, v_ptrs, kv_mask, keep, m_i, l_i, acc, scale_log2, clip_log2,
    USE_CLIP: tl.constexpr, USE_KEEP: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    """q [M, D]; k_ptrs, v_ptrs [N, D] with kv_mask; keep broadcasts to [M, N]. Returns (m, l, acc)."""
    k = tl.load(k_ptrs, mask=kv_mask, other=0.0)
    v = tl.load(v_ptrs, mask=kv_mask, other=0.0)
    return attend_kv(q, k, v, keep, m_i, l_i, acc, scale_log2, clip_log2, USE_CLIP, USE_KEEP, DOT_PRECISION)


def _attend_kv(
    q, k, v, keep, m_i, l_i, acc, scale_log2, clip_log2,
    USE_CLIP: tl.constexpr, USE_KEEP: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    """The step on loaded K/V tiles [N, D] (any dtype; cast to q's).

    Without a clip the scale is folded into the exponent (the row max of the raw scores, scaled, is the max of the
    scaled ones): one multiply-add a score. The accumulator is rescaled first and the P @ V product accumulates into
    it (`tl.dot`'s acc), as Hopper's wgmma does, rather than into a fresh tile added afterwards."""
    s = tl.dot(q, tl.trans(k.to(q.dtype)), input_precision=DOT_PRECISION)  # [M, N]
    if USE_CLIP:
        s = tl.minimum(tl.maximum(s * scale_log2, -clip_log2), clip_log2)
        scale = 1.0
    else:
        scale = scale_log2
    if USE_KEEP:
        s = tl.where(keep, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1) * scale)
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s * scale - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    acc = tl.dot(p.to(q.dtype), v.to(q.dtype), acc, input_precision=DOT_PRECISION)
    return m_new, l_i, acc

attend_kv = triton.jit(_attend_kv) if triton is not None else _attend_kv
attend_tile = triton.jit(_attend_tile) if triton is not None else _attend_tile


def dot_options(query: torch.Tensor, k_cache: torch.Tensor) -> dict[str, str | bool]:
    """The dtype constexprs of a kernel calling `attend_tile`: fp32 queries get exact (ieee) dots;
    an fp8 cache with bf16 queries computes in fp16 (the kernel casts q, the tile casts K/V to q's dtype)."""
    return {
        "DOT_PRECISION": "ieee" if query.dtype == torch.float32 else "tf32",
        "COMPUTE_F16": k_cache.dtype == torch.float8_e4m3fn and query.dtype == torch.bfloat16,
    }
