"""A linear layer for steps of few rows: out [M, N] = x [M, K] @ weight [N, K]^T (+ bias), M <= MAX_ROWS.

A decode step of one to a few sequences reads every weight once and does almost no arithmetic: its
projections are bound by memory bandwidth. cuBLAS reached 60% of an H100's on Qwen2-7B's qkv and o_proj
(M = 1), and split the down projection into three launches (a memset, the GEMM, a reduce; experiments/
RESULTS.md, "Where azure-code's step time goes"). This kernel streams the weight once in one launch:

    program p owns output columns [p * BLOCK_N, (p + 1) * BLOCK_N), i.e. BLOCK_N contiguous weight rows,
    and walks K in BLOCK_K steps:   acc [16, BLOCK_N] += x [16, BLOCK_K] @ w [BLOCK_N, BLOCK_K]^T
    rows of x past M are masked to 0 (tl.dot needs 16 rows; the arithmetic is free, the bytes are w's)

A narrow weight (qkv, o_proj: N = 3,584-4,608) gives one program per BLOCK_N columns too few programs to keep an
H100's 132 SMs streaming (cuBLAS reached 55-64% of the bandwidth there, this form 35-40%). Split-K launches
`split_k` programs per column block, each over one contiguous slice of K, writing fp32 partials [split_k, M, N];
a second launch sums them in split order, adds the bias and casts:

    program (p, s): acc [16, BLOCK_N] over k in [s * K_SPLIT, (s + 1) * K_SPLIT)  ->  partial[s]
    reduce:         out = sum_s partial[s] (+ bias), s = 0, 1, ... in turn

Each output row is the same fp32 accumulation whatever M is (the padded rows never enter another row's
dot), so a sequence's logits do not depend on how many others share its step. Which launch is fastest, and
whether it beats cuBLAS at all, depends on the shape and the GPU: the runtime times them when an engine
starts (`runtime.skinny`), never guesses.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from kernels._triton import kernel_for, tl

__all__ = ["CANDIDATES", "MAX_ROWS", "SkinnyTuning", "skinny_linear", "skinny_linear_reference"]

MAX_ROWS = 16  # rows one program computes: tl.dot's smallest tile
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class SkinnyTuning(NamedTuple):
    """Launch parameters."""

    block_n: int  # output columns (weight rows) per program
    block_k: int  # weight columns per step of the K loop
    num_warps: int
    num_stages: int
    split_k: int = 1  # programs per column block, each over a slice of K (fp32 partials, then a reduce launch)


# Few, different-shaped candidates: narrow tiles give a short projection (N = 3,584) enough programs to keep
# every SM streaming; wide ones suit the MLP and the LM head. The start-up timing picks among them.
CANDIDATES = (
    SkinnyTuning(16, 512, 4, 3),
    SkinnyTuning(16, 256, 4, 4),
    SkinnyTuning(32, 256, 4, 4),
    SkinnyTuning(32, 512, 8, 3),
    SkinnyTuning(64, 256, 8, 3),
    SkinnyTuning(32, 256, 4, 3, split_k=4),
    SkinnyTuning(16, 128, 4, 3, split_k=8),
)
REDUCE_BLOCK = 128  # output columns per program of the split-K reduce


def _skinny_kernel(
    x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, K_SPLIT, stride_xm, stride_wn, stride_os, stride_om,
    HAS_BIAS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    offs_m = tl.arange(0, 16)
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_mask = offs_m < M
    n_mask = offs_n < N
    x_rows = x_ptr + offs_m[:, None] * stride_xm
    w_rows = w_ptr + offs_n[:, None].to(tl.int64) * stride_wn  # why int64: N * K passes 2**31 in an LM head
    k_start = tl.program_id(1) * K_SPLIT  # K_SPLIT = K without split-K
    k_end = tl.minimum(k_start + K_SPLIT, K)
    acc = tl.zeros([16, BLOCK_N], tl.float32)
    for k0 in range(k_start, k_end, BLOCK_K):
        k = k0 + offs_k
        k_mask = k < k_end
        x = tl.load(x_rows + k[None, :], mask=m_mask[:, None] & k_mask[None, :], other=0.0)  # [16, BLOCK_K]
        w = tl.load(w_rows + k[None, :], mask=n_mask[:, None] & k_mask[None, :], other=0.0)  # [BLOCK_N, BLOCK_K]
        acc = tl.dot(x, tl.trans(w), acc, input_precision=DOT_PRECISION)
    if HAS_BIAS:
        acc += tl.load(b_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    out_rows = out_ptr + tl.program_id(1) * stride_os + offs_m[:, None] * stride_om
    tl.store(out_rows + offs_n[None, :], acc.to(out_ptr.dtype.element_ty), mask=m_mask[:, None] & n_mask[None, :])


_skinny_kernel.do_not_specialize = ("M",)  # one compiled form for every row count


def _split_reduce_kernel(
    part_ptr, b_ptr, out_ptr, M, N, stride_ps, stride_pm, stride_om,
    SPLIT_K: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    offs_m = tl.arange(0, 16)
    offs_n = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
    parts = part_ptr + offs_m[:, None] * stride_pm + offs_n[None, :]
    acc = tl.zeros([16, BLOCK], tl.float32)
    for s in tl.static_range(SPLIT_K):  # in split order: a row's sum does not depend on the other rows
        acc += tl.load(parts + s * stride_ps, mask=mask, other=0.0)
    if HAS_BIAS:
        acc += tl.load(b_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :], acc.to(out_ptr.dtype.element_ty), mask=mask)


_split_reduce_kernel.do_not_specialize = ("M",)


def _fail(message: str) -> None:
    raise ValueError(f"skinny_linear: {message}")


def _check(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    if x.dim() != 2 or weight.dim() != 2:
        _fail(f"x must be [M, K] and weight [N, K], got {tuple(x.shape)} and {tuple(weight.shape)}")
    if x.shape[1] != weight.shape[1]:
        _fail(f"x has {x.shape[1]} columns but weight has {weight.shape[1]}")
    if x.shape[0] > MAX_ROWS:
        _fail(f"at most {MAX_ROWS} rows, got {x.shape[0]}")
    if x.dtype not in DTYPES or weight.dtype != x.dtype:
        _fail(f"x and weight must share one dtype of {DTYPES}, got {x.dtype}/{weight.dtype}")
    if weight.device != x.device:
        _fail(f"x is on {x.device} but weight is on {weight.device}")
    if x.stride(-1) != 1 or weight.stride(-1) != 1:
        _fail("x and weight need a contiguous last dimension")
    if bias is not None and (bias.shape != (weight.shape[0],) or bias.dtype != x.dtype or bias.stride(0) != 1):
        _fail(f"bias must be a contiguous [{weight.shape[0]}] {x.dtype}, got {tuple(bias.shape)} {bias.dtype}")


def _output(x: torch.Tensor, n: int, out: torch.Tensor | None) -> torch.Tensor:
    if out is None:
        return torch.empty(x.shape[0], n, dtype=x.dtype, device=x.device)
    if out.shape != (x.shape[0], n) or out.dtype != x.dtype or out.device != x.device or out.stride(-1) != 1:
        _fail(f"out must be a [{x.shape[0]}, {n}] {x.dtype} on {x.device} with a contiguous last dimension, "
              f"got {tuple(out.shape)} {out.dtype} on {out.device}")
    return out


def skinny_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *,
                  tuning: SkinnyTuning = CANDIDATES[0], out: torch.Tensor | None = None) -> torch.Tensor:
    """Triton: x [M, K] (M <= MAX_ROWS) @ weight [N, K]^T + bias [N] -> [M, N], written into `out` when given
    (a view of a larger buffer is fine). Never synchronizes with the device."""
    _check(x, weight, bias)
    if tuning.split_k < 1 or tuning.block_n < 16 or tuning.block_k < 16:
        _fail(f"tuning needs split_k >= 1 and tiles of at least 16 (tl.dot's), got {tuning}")
    n = weight.shape[0]
    out = _output(x, n, out)
    if x.shape[0] == 0 or n == 0:
        return out
    if tuning.split_k == 1:
        _launch(x, weight, bias, out, tuning, k_split=x.shape[1])
        return out
    # the partials of every row the kernel computes: rows past M are masked on store and load alike
    parts = torch.empty(tuning.split_k, x.shape[0], n, dtype=torch.float32, device=x.device)
    k_split = _cdiv(_cdiv(x.shape[1], tuning.split_k), tuning.block_k) * tuning.block_k  # whole steps of the loop
    _launch(x, weight, None, parts, tuning, k_split=k_split)
    kernel_for(_split_reduce_kernel, x.device)[(_cdiv(n, REDUCE_BLOCK),)](
        parts, weight if bias is None else bias, out, x.shape[0], n, parts.stride(0), parts.stride(1), out.stride(0),
        SPLIT_K=tuning.split_k, HAS_BIAS=bias is not None, BLOCK=REDUCE_BLOCK, num_warps=4,
    )  # fmt: skip
    return out


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _launch(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor,
            tuning: SkinnyTuning, *, k_split: int) -> None:
    """The GEMM launch: `out` [M, N] (bias added, cast), or with split-K the fp32 partials [split_k, M, N]."""
    n = weight.shape[0]
    kernel_for(_skinny_kernel, x.device)[(_cdiv(n, tuning.block_n), tuning.split_k)](
        x, weight, weight if bias is None else bias, out, x.shape[0], n, x.shape[1], k_split,
        x.stride(0), weight.stride(0), out.stride(0) if out.dim() == 3 else 0, out.stride(-2),
        HAS_BIAS=bias is not None, BLOCK_N=tuning.block_n, BLOCK_K=tuning.block_k,
        DOT_PRECISION="ieee" if x.dtype == torch.float32 else "tf32",
        num_warps=tuning.num_warps, num_stages=tuning.num_stages,
    )  # fmt: skip


def skinny_linear_reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Torch version of `skinny_linear` (cuBLAS on a GPU)."""
    _check(x, weight, bias)
    return F.linear(x, weight, bias)
