"""Paged decode attention: one query token per sequence against its paged K/V.

One program per (sequence, kv head, partition) computes all the GQA query heads that share the kv
head, so each K/V byte is read once. Keys are visited in tiles of BLOCK_N positions; a tile may
span several cache blocks (block ids come from the table per position):

    position p -> block_tables[b, p // BLOCK_SIZE], offset p % BLOCK_SIZE     (BLOCK_SIZE constexpr)

Split-KV (flash-decoding): when the table width allows contexts longer than `split_kv_min_len`
and the batch alone would leave the GPU short of programs, the launch gets P > 1 partitions. Each
sequence longer than `split_kv_min_len` spreads its own positions evenly over the P programs
(ceil(ctx / P), rounded up to BLOCK_N); shorter ones keep all positions in partition 0. Each program
writes a normalized partial output and its log-sum-exp (base 2); `_reduce_kernel` merges them.
One compiled form of each kernel serves every batch: P is capped at MAX_PARTITIONS, the reduce always
tiles that many partitions, the log-sum-exp rows are padded to a multiple of 16 (so their strides keep
one divisibility), and the integer arguments that change from step to step (the table's stride, P) are
not specialised on. A compile in the middle of serving stalls a step for a fraction of a second.
Softmax runs in base 2: scores are scaled by scale*log2(e), and so is the clip bound (clipping
commutes with that positive factor).
An fp8 (e4m3) cache with bf16 queries runs its dot products in fp16 (one conversion from e4m3;
bf16 would go through fp32); accumulation and softmax are fp32 in every case.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import torch

from kernels._checks import check_cache_pair, check_clip, check_index, check_query, output_for
from kernels._gather import gather_kv_padded, masked_softmax_attend
from kernels._softmax_tile import attend_tile, dot_options
from kernels._triton import kernel_for, next_power_of_2, tl

__all__ = ["DecodeTuning", "launch_paged_decode", "paged_decode", "paged_decode_reference"]

LOG2E = 1.4426950408889634
MAX_PARTITIONS = 64  # split-KV partitions per sequence, at most (the reduce's fixed tile)


class DecodeTuning(NamedTuple):
    """Launch parameters; defaults measured on an H200 (experiments/RESULTS.md)."""

    block_n: int = 64  # key positions per tile
    programs_per_sm: int = 2  # split-KV adds partitions until the grid has this many programs per SM
    min_partition: int = 256  # ... but never more partitions than the table width / this
    num_warps: int = 4
    num_stages: int = 3


def _decode_kernel(
    q_ptr, k_ptr, v_ptr, bt_ptr, ctx_ptr, out_ptr, lse_ptr,
    scale_log2, clip_log2, split_kv_min_len,
    stride_qb, stride_qh, stride_kb, stride_ko, stride_kh, stride_vb, stride_vo, stride_vh, stride_bt,
    stride_ob, stride_oh, stride_os, stride_lb, stride_lh,
    GROUP: tl.constexpr, BLOCK_G: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT: tl.constexpr,
    USE_CLIP: tl.constexpr, DOT_PRECISION: tl.constexpr, COMPUTE_F16: tl.constexpr,
):  # fmt: skip
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    part = tl.program_id(2)
    ctx = tl.load(ctx_ptr + seq)
    if SPLIT:
        is_split = ctx > split_kv_min_len
        part_len = tl.cdiv(tl.cdiv(ctx, tl.num_programs(2)), BLOCK_N) * BLOCK_N
        start = tl.where(is_split, part * part_len, tl.where(part == 0, 0, ctx))
        end = tl.where(is_split, tl.minimum(start + part_len, ctx), ctx)
    else:
        start = 0
        end = ctx

    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    d_mask = offs_d < HEAD_DIM
    heads = kv_head * GROUP + offs_g  # [BLOCK_G]; rows >= GROUP are padding for the dot's minimum M
    gd_mask = (offs_g < GROUP)[:, None] & d_mask[None, :]
    q = tl.load(q_ptr + seq * stride_qb + heads[:, None] * stride_qh + offs_d[None, :], mask=gd_mask, other=0.0)
    if COMPUTE_F16:  # why: an fp8 cache converts to fp16 in one step, to bf16 only through fp32
        q = q.to(tl.float16)

    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    table = bt_ptr + seq * stride_bt
    for n0 in range(start, end, BLOCK_N):
        pos = n0 + offs_n  # [BLOCK_N]
        valid = pos < end
        block = tl.load(table + pos // BLOCK_SIZE, mask=valid, other=0).to(tl.int64)
        within = pos % BLOCK_SIZE
        nd_mask = valid[:, None] & d_mask[None, :]
        k_rows = block * stride_kb + within * stride_ko + kv_head * stride_kh
        v_rows = block * stride_vb + within * stride_vo + kv_head * stride_vh
        m_i, l_i, acc = attend_tile(
            q, k_ptr + k_rows[:, None] + offs_d[None, :], v_ptr + v_rows[:, None] + offs_d[None, :], nd_mask,
            valid[None, :], m_i, l_i, acc, scale_log2, clip_log2, USE_CLIP, True, DOT_PRECISION,
        )  # fmt: skip

    # why the guard: an empty partition has l_i == 0; its output is never weighted in (lse = -inf)
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    out_ptrs = out_ptr + seq * stride_ob + heads[:, None] * stride_oh + part * stride_os + offs_d[None, :]
    tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=gd_mask)
    if SPLIT:
        lse = tl.where(l_i > 0, m_i + tl.log2(l_i), float("-inf"))
        tl.store(lse_ptr + seq * stride_lb + heads * stride_lh + part, lse, mask=offs_g < GROUP)


_decode_kernel.do_not_specialize = ("split_kv_min_len", "stride_bt")


def _reduce_kernel(
    part_ptr, lse_ptr, out_ptr, num_parts,
    stride_pb, stride_ph, stride_ps, stride_lb, stride_lh, stride_ob, stride_oh,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_P: tl.constexpr,
):  # fmt: skip
    seq = tl.program_id(0)
    head = tl.program_id(1)
    offs_p = tl.arange(0, BLOCK_P)
    offs_d = tl.arange(0, BLOCK_D)
    p_mask = offs_p < num_parts
    lse = tl.load(lse_ptr + seq * stride_lb + head * stride_lh + offs_p, mask=p_mask, other=float("-inf"))
    top = tl.max(lse, 0)
    top = tl.where(top == float("-inf"), 0.0, top)
    weight = tl.exp2(lse - top)  # [BLOCK_P]; empty partitions weigh 0
    part_ptrs = part_ptr + seq * stride_pb + head * stride_ph + offs_p[:, None] * stride_ps + offs_d[None, :]
    parts = tl.load(part_ptrs, mask=p_mask[:, None] & (offs_d < HEAD_DIM)[None, :], other=0.0)
    total = tl.sum(weight, 0)
    out = tl.sum(parts * weight[:, None], 0) / tl.where(total > 0, total, 1.0)
    tl.store(
        out_ptr + seq * stride_ob + head * stride_oh + offs_d, out.to(out_ptr.dtype.element_ty), mask=offs_d < HEAD_DIM
    )


_reduce_kernel.do_not_specialize = ("num_parts",)


@functools.cache
def _multiprocessors(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1


def _num_partitions(programs: int, max_context: int, tuning: DecodeTuning, device: torch.device) -> int:
    """Partitions per sequence: enough to give every SM `programs_per_sm` programs, within limits."""
    wanted = math.ceil(tuning.programs_per_sm * _multiprocessors(device) / programs)
    return max(1, min(wanted, math.ceil(max_context / tuning.min_partition), MAX_PARTITIONS))


def _check_decode_args(query, k_cache, v_cache, block_tables, context_lens, scale, qk_clip):
    geometry = check_cache_pair("paged_decode", k_cache, v_cache)
    check_query("paged_decode", query, geometry, k_cache.device)
    batch = query.shape[0]
    if block_tables.dim() != 2:
        raise ValueError(f"paged_decode: block_tables must be [B, max_blocks], got {tuple(block_tables.shape)}")
    check_index(
        "paged_decode", "block_tables", block_tables, (batch, block_tables.shape[1]), torch.int32, k_cache.device
    )
    check_index("paged_decode", "context_lens", context_lens, (batch,), torch.int32, k_cache.device)
    check_clip("paged_decode", scale, qk_clip)
    return geometry


def launch_paged_decode(
    query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    context_lens: torch.Tensor, *, scale: float, qk_clip: float | None, split_kv_min_len: int,
    tuning: DecodeTuning, max_context: int | None = None, out: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """`paged_decode` with explicit launch parameters (benchmarks sweep them)."""
    geometry = _check_decode_args(query, k_cache, v_cache, block_tables, context_lens, scale, qk_clip)
    batch, num_heads, head_dim = query.shape
    group = num_heads // geometry.num_kv_heads
    out = output_for("paged_decode", query, out)
    if batch == 0:
        return out
    # why this bound: the table's width caps every context, and reading it needs no device sync
    max_context = max_context or block_tables.shape[1] * geometry.block_size
    num_parts = 1
    if max_context > split_kv_min_len:
        num_parts = _num_partitions(batch * geometry.num_kv_heads, max_context, tuning, query.device)
    split = num_parts > 1
    if split:
        partial = torch.empty(batch, num_heads, num_parts, head_dim, dtype=torch.float32, device=query.device)
        lse = torch.empty(batch, num_heads, -(-num_parts // 16) * 16, dtype=torch.float32, device=query.device)
        target, t_strides, lse_strides = partial, partial.stride()[:3], lse.stride()[:2]
    else:
        lse = partial = None
        target, t_strides, lse_strides = out, (*out.stride()[:2], 0), (0, 0)
    kernel = kernel_for(_decode_kernel, query.device)
    kernel[(batch, geometry.num_kv_heads, num_parts)](
        query, k_cache, v_cache, block_tables, context_lens, target, lse,
        scale * LOG2E, (qk_clip or 0.0) * LOG2E, split_kv_min_len,
        query.stride(0), query.stride(1), *k_cache.stride()[:3], *v_cache.stride()[:3], block_tables.stride(0),
        *t_strides, *lse_strides,
        GROUP=group, BLOCK_G=max(16, next_power_of_2(group)), HEAD_DIM=head_dim,
        BLOCK_D=max(16, next_power_of_2(head_dim)), BLOCK_SIZE=geometry.block_size, BLOCK_N=tuning.block_n,
        SPLIT=split, USE_CLIP=qk_clip is not None,
        **dot_options(query, k_cache),
        num_warps=tuning.num_warps, num_stages=tuning.num_stages,
    )  # fmt: skip
    if split:
        reduce = kernel_for(_reduce_kernel, query.device)
        reduce[(batch, num_heads)](
            partial, lse, out, num_parts, *partial.stride()[:3], *lse.stride()[:2], *out.stride()[:2],
            HEAD_DIM=head_dim, BLOCK_D=next_power_of_2(head_dim), BLOCK_P=MAX_PARTITIONS,
            num_warps=4,
        )  # fmt: skip
    return out


def paged_decode(
    query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    context_lens: torch.Tensor, *, scale: float, split_kv_min_len: int, qk_clip: float | None = None,
    max_context: int | None = None, out: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """Decode attention over the paged cache (Triton).

    query [B, Hq, D]; k_cache, v_cache [num_blocks, block_size, Hkv, D]; block_tables [B, max_blocks]
    int32; context_lens [B] int32 (>= 1, the query's own K/V already written). Returns [B, Hq, D]: `out`
    when given (written in place: a view of the step's attention output saves a copy), else a new tensor.
    `max_context`: the longest context the caller can ever pass (its max_model_len), which sizes the
    split-KV partitions; without it, the table's width. Two calls with the same batch size and bound
    split the same way, so they give the same values (an engine's eager steps and its CUDA graphs).
    Never synchronizes with the device.
    """
    return launch_paged_decode(
        query, k_cache, v_cache, block_tables, context_lens,
        scale=scale, qk_clip=qk_clip, split_kv_min_len=split_kv_min_len, tuning=DecodeTuning(),
        max_context=max_context, out=out,
    )  # fmt: skip


def paged_decode_reference(
    query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    context_lens: torch.Tensor, *, scale: float, qk_clip: float | None = None,
) -> torch.Tensor:  # fmt: skip
    """Torch version of `paged_decode` in fp32 (cast back to the query dtype)."""
    geometry = _check_decode_args(query, k_cache, v_cache, block_tables, context_lens, scale, qk_clip)
    batch, num_heads, head_dim = query.shape
    if batch == 0:
        return torch.empty_like(query)
    max_len = int(context_lens.max())
    k = gather_kv_padded(k_cache, block_tables, max_len).transpose(1, 2)  # [B, Hkv, L, D]
    v = gather_kv_padded(v_cache, block_tables, max_len).transpose(1, 2)
    q = query.view(batch, geometry.num_kv_heads, -1, 1, head_dim)  # [B, Hkv, G, 1, D]
    visible = torch.arange(max_len, device=query.device)[None, :] < context_lens[:, None]  # [B, L]
    out = masked_softmax_attend(q, k, v, visible[:, None, None, None, :], scale, qk_clip)  # [B, Hkv, G, 1, D]
    return out.reshape(batch, num_heads, head_dim).to(query.dtype)
