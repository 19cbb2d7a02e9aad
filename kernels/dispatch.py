"""The entry points the runtime calls, choosing an implementation per call.

use_triton=False: the torch references everywhere (the CPU path; exact fp32 math).
use_triton=True:  RMSNorm (+ residual add), rotary embedding and the gated activation -> their fused
Triton kernels; decode -> `paged_decode`; KV write -> Triton `write_kv`; prefill -> per sequence,
chunks of at least `flash_min_len` query tokens go to the Triton flash kernel and shorter ones to
torch SDPA over their gathered K/V (with `qk_clip` set the short path runs the explicit clipped
softmax instead, since SDPA cannot clip).
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F

from kernels import activation, kv_write, norm, rotary
from kernels._gather import gather_kv_padded, masked_softmax_attend
from kernels.paged_decode import paged_decode, paged_decode_reference
from kernels.paged_prefill import paged_prefill, paged_prefill_reference

__all__ = ["apply_rotary", "decode_attention", "prefill_attention", "rms_norm", "silu_and_mul", "write_kv"]


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None, *, use_triton: bool
) -> norm.NormOutput:
    """(weight * normalised(x + residual), x + residual); without a residual, x is normalised."""
    return (norm.rms_norm if use_triton else norm.rms_norm_reference)(x, weight, eps, residual)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, use_triton: bool) -> torch.Tensor:
    """Rotary embedding of x [T, H, D] with cos/sin [T, D]; the Triton path writes into x and returns it."""
    return (rotary.apply_rotary if use_triton else rotary.apply_rotary_reference)(x, cos, sin)


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
) -> torch.Tensor:  # fmt: skip
    """One query token per sequence: query [B, Hq, D] -> [B, Hq, D]."""
    if use_triton:
        return paged_decode(
            query,
            k_cache,
            v_cache,
            block_tables,
            context_lens,
            scale=scale,
            qk_clip=qk_clip,
            split_kv_min_len=split_kv_min_len,
        )
    return paged_decode_reference(query, k_cache, v_cache, block_tables, context_lens, scale=scale, qk_clip=qk_clip)


def prefill_attention(
    query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    query_start_loc: torch.Tensor, context_lens: torch.Tensor, *, scale: float, qk_clip: float | None,
    flash_min_len: int, use_triton: bool,
) -> torch.Tensor:  # fmt: skip
    """Causal attention for B chunks: query [T, Hq, D] -> [T, Hq, D] (see `paged_prefill`)."""
    if not use_triton:
        return paged_prefill_reference(
            query, k_cache, v_cache, block_tables, query_start_loc, context_lens, scale=scale, qk_clip=qk_clip
        )
    # why the host copy: picking a path per sequence needs the chunk lengths (one sync per prefill step)
    starts = query_start_loc.tolist()
    q_lens = [end - start for start, end in itertools.pairwise(starts)]
    flash = [seq for seq, n in enumerate(q_lens) if n >= flash_min_len]
    short = [seq for seq, n in enumerate(q_lens) if 0 < n < flash_min_len]
    if len(flash) == len(q_lens):
        return paged_prefill(
            query, k_cache, v_cache, block_tables, query_start_loc, context_lens, scale=scale, qk_clip=qk_clip
        )
    out = torch.empty_like(query)
    if flash:
        rows = _rows_of(flash, starts, query.device)
        sub_starts = torch.tensor(
            [0, *torch.tensor([q_lens[s] for s in flash]).cumsum(0).tolist()], dtype=torch.int32, device=query.device
        )
        picked = torch.tensor(flash, device=query.device)
        out[rows] = paged_prefill(
            query[rows],
            k_cache,
            v_cache,
            block_tables[picked],
            sub_starts,
            context_lens[picked],
            scale=scale,
            qk_clip=qk_clip,
        )
    if short:
        out[_rows_of(short, starts, query.device)] = _short_prefill(
            query, k_cache, v_cache, block_tables, context_lens, short, starts, scale, qk_clip
        )
    return out


def _rows_of(seqs: list[int], starts: list[int], device: torch.device) -> torch.Tensor:
    """The query rows of `seqs`, in order: int64 [sum of their chunk lengths]."""
    return torch.cat([torch.arange(starts[s], starts[s + 1]) for s in seqs]).to(device)


def _short_prefill(
    query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    context_lens: torch.Tensor, seqs: list[int], starts: list[int], scale: float, qk_clip: float | None,
) -> torch.Tensor:  # fmt: skip
    """Short chunks, padded into one batch for SDPA: returns the rows of `seqs`, in order."""
    device, dtype = query.device, query.dtype
    num_kv_heads, head_dim = k_cache.shape[2], k_cache.shape[3]
    q_lens = torch.tensor([starts[s + 1] - starts[s] for s in seqs])  # [S], on the host
    picked = torch.tensor(seqs, device=device)
    ctx = context_lens[picked].long()  # [S]
    max_q, max_ctx = int(q_lens.max()), int(ctx.max())
    # Padding rows repeat the chunk's last row (same mask too): finite, and dropped at the end.
    row = torch.minimum(torch.arange(max_q)[None, :], q_lens[:, None] - 1)  # [S, max_q]
    q_rows = (torch.tensor([starts[s] for s in seqs])[:, None] + row).to(device)
    q = query[q_rows].view(len(seqs), max_q, num_kv_heads, -1, head_dim).permute(0, 2, 3, 1, 4)  # [S, Hkv, G, Mq, D]
    k = gather_kv_padded(k_cache, block_tables[picked], max_ctx).to(dtype).transpose(1, 2)  # [S, Hkv, Mk, D]
    v = gather_kv_padded(v_cache, block_tables[picked], max_ctx).to(dtype).transpose(1, 2)
    q_pos = ctx[:, None] - q_lens.to(device)[:, None] + row.to(device)  # [S, max_q]
    visible = torch.arange(max_ctx, device=device)[None, None, :] <= q_pos[:, :, None]  # [S, Mq, Mk]
    if qk_clip is None:
        group = q.shape[2]
        mask = visible[:, None].expand(-1, group, -1, -1).reshape(len(seqs), 1, group * max_q, max_ctx)
        flat = F.scaled_dot_product_attention(
            q.reshape(len(seqs), num_kv_heads, group * max_q, head_dim), k, v, attn_mask=mask, scale=scale
        )
        o = flat.view(q.shape)
    else:
        o = masked_softmax_attend(q, k, v, visible[:, None, None], scale, qk_clip).to(dtype)
    o = o.permute(0, 3, 1, 2, 4).reshape(len(seqs) * max_q, -1, head_dim)  # [S * max_q, Hq, D]
    keep = (torch.arange(max_q)[None, :] < q_lens[:, None]).flatten().nonzero().squeeze(1)  # on the host: no sync
    return o[keep.to(device)]
