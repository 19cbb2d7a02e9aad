"""The entry points the runtime calls, choosing an implementation per call.

use_triton=False: the torch references everywhere (the CPU path; exact fp32 math).
use_triton=True:  RMSNorm (+ residual add), rotary embedding and the gated activation -> their fused
Triton kernels; decode -> `paged_decode`; KV write -> Triton `write_kv`; prefill -> per sequence,
chunks of at least `flash_min_len` query tokens go to the Triton flash kernel (or, with
`prefill_kernel="fa4"`, FlashAttention 4's: `kernels.fa4_prefill`) and shorter ones to
torch SDPA over their gathered K/V (with `qk_clip` set the short path runs the explicit clipped
softmax instead, since SDPA cannot clip).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels import activation, kv_write, norm, rotary
from kernels._gather import gather_kv_padded, masked_softmax_attend
from kernels.fa4_prefill import fa4_paged_prefill
from kernels.paged_decode import paged_decode, paged_decode_reference
from kernels.paged_prefill import paged_prefill, paged_prefill_reference
from kernels.prefill_plan import PrefillPlan, ShortChunks, plan_prefill

__all__ = ["apply_rotary", "decode_attention", "plan_prefill", "prefill_attention", "rms_norm", "silu_and_mul",
           "write_kv"]


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None, *, use_triton: bool,
    residual_out: torch.Tensor | None = None,
) -> norm.NormOutput:  # fmt: skip
    """(weight * normalised(x + residual), x + residual); without a residual, x is normalised. The second is
    written into `residual_out` when given (it may be `residual`)."""
    return (norm.rms_norm if use_triton else norm.rms_norm_reference)(x, weight, eps, residual,
                                                                        residual_out=residual_out)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor | None = None, *,
                 use_triton: bool) -> torch.Tensor:
    """Rotary embedding of x [T, H, D] with cos/sin [T, D] (or tables [P, D] read at `positions`); the Triton
    path writes into x and returns it."""
    return (rotary.apply_rotary if use_triton else rotary.apply_rotary_reference)(x, cos, sin, positions)


def silu_and_mul(x: torch.Tensor, *, use_triton: bool) -> torch.Tensor:
    """silu(gate) * up of a fused gate/up projection [T, 2I] -> [T, I]."""
    return (activation.silu_and_mul if use_triton else activation.silu_and_mul_reference)(x)


def write_kv(
    key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
    slot_mapping: torch.Tensor, *, use_triton: bool,
) -> None:  # fmt: skip
    """Scatter key/value [T, Hkv, D] into their slots (int64 [T]) of the paged caches, in place."""
    write = kv_write.write_kv if use_triton else kv_write.write_kv_reference
    write(key, value, k_cache, v_cache, slot_mapping)


def decode_attention(
    query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    context_lens: torch.Tensor, *, scale: float, qk_clip: float | None, split_kv_min_len: int, use_triton: bool,
    max_context: int | None = None, out: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """One query token per sequence: query [B, Hq, D] -> [B, Hq, D], into `out` when given (the Triton kernel
    writes it directly); `max_context` see `paged_decode`."""
    if use_triton:
        return paged_decode(
            query, k_cache, v_cache, block_tables, context_lens, scale=scale, qk_clip=qk_clip,
            split_kv_min_len=split_kv_min_len, max_context=max_context, out=out,
        )  # fmt: skip
    return _into(out, paged_decode_reference(query, k_cache, v_cache, block_tables, context_lens, scale=scale,
                                             qk_clip=qk_clip))


def _into(out: torch.Tensor | None, result: torch.Tensor) -> torch.Tensor:
    """A reference's result, copied into `out` when the caller gave one."""
    return result if out is None else out.copy_(result)


def prefill_attention(
    query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    query_start_loc: torch.Tensor, context_lens: torch.Tensor, *, scale: float, qk_clip: float | None,
    flash_min_len: int, use_triton: bool, plan: PrefillPlan | None = None, out: torch.Tensor | None = None,
    kernel: str = "triton",
) -> torch.Tensor:  # fmt: skip
    """Causal attention for B chunks: query [T, Hq, D] -> [T, Hq, D] (see `paged_prefill`), into `out` when
    given. `plan`: which chunk takes which path and the flash launch (`plan_prefill`, built once a step); without
    one it is built here, which reads the lengths back from the device. `kernel`: the flash path's, "triton"
    (`paged_prefill`) or "fa4" (`fa4_paged_prefill`; the caller has checked it can run)."""
    if not use_triton:
        return _into(out, paged_prefill_reference(
            query, k_cache, v_cache, block_tables, query_start_loc, context_lens, scale=scale, qk_clip=qk_clip
        ))
    if plan is None:
        plan = plan_prefill(query_start_loc.tolist(), context_lens.tolist(), flash_min_len, query.device,
                           k_cache.shape[1])
    if plan.all_flash:
        return _flash(kernel, plan, query, k_cache, v_cache, block_tables, query_start_loc, context_lens, scale,
                      qk_clip, out)
    out = torch.empty_like(query) if out is None else out
    if plan.flash is not None:
        f = plan.flash
        out[f.rows] = _flash(kernel, plan, query[f.rows], k_cache, v_cache, block_tables[f.seqs], f.starts,
                             context_lens[f.seqs], scale, qk_clip)
    if plan.short is not None:
        out[plan.short.rows] = _short_prefill(query, k_cache, v_cache, block_tables, plan.short, scale, qk_clip)
    return out


def _flash(
    kernel: str, plan: PrefillPlan, query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
    block_tables: torch.Tensor, query_start_loc: torch.Tensor, context_lens: torch.Tensor, scale: float,
    qk_clip: float | None, out: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """The flash path's chunks by `kernel`; the plan's bounds cover any subset of its chunks."""
    if kernel == "fa4":
        return fa4_paged_prefill(query, k_cache, v_cache, block_tables, query_start_loc, context_lens, scale=scale,
                                 max_q=plan.max_q, max_k=plan.max_ctx, out=out)
    return paged_prefill(query, k_cache, v_cache, block_tables, query_start_loc, context_lens, scale=scale,
                         qk_clip=qk_clip, out=out, tuning=plan.tuning)


def _short_prefill(
    query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    short: ShortChunks, scale: float, qk_clip: float | None,
) -> torch.Tensor:  # fmt: skip
    """Short chunks, padded into one batch for SDPA: returns their rows, in order (no host sync)."""
    dtype = query.dtype
    num_kv_heads, head_dim = k_cache.shape[2], k_cache.shape[3]
    seqs, max_q = short.padded_rows.shape
    q = query[short.padded_rows].view(seqs, max_q, num_kv_heads, -1, head_dim).permute(0, 2, 3, 1, 4)
    k = gather_kv_padded(k_cache, block_tables[short.seqs], short.max_ctx).to(dtype).transpose(1, 2)  # [S, Hkv, Mk, D]
    v = gather_kv_padded(v_cache, block_tables[short.seqs], short.max_ctx).to(dtype).transpose(1, 2)
    if qk_clip is None:
        group = q.shape[2]
        mask = short.visible[:, None].expand(-1, group, -1, -1).reshape(seqs, 1, group * max_q, short.max_ctx)
        flat = F.scaled_dot_product_attention(
            q.reshape(seqs, num_kv_heads, group * max_q, head_dim), k, v, attn_mask=mask, scale=scale
        )
        o = flat.view(q.shape)
    else:
        o = masked_softmax_attend(q, k, v, short.visible[:, None, None], scale, qk_clip).to(dtype)
    o = o.permute(0, 3, 1, 2, 4).reshape(seqs * max_q, -1, head_dim)  # [S * max_q, Hq, D]
    return o[short.keep]
