"""A linear layer for steps of few rows: out [M, N] = x [M, K] @ weight [N, K]^T (+ bias), M <= MAX_ROWS.

A decode step of one to a few sequences reads every weight once and does almost no arithmetic: its
projections are bound by memory bandwidth. cuBLAS reached 60% of an H100's on Qwen2-7B's qkv and o_proj
(M = 1), and split the down projection into three launches (a memset, the GEMM, a reduce; experiments/
RESULTS.md, "Where azure-code's step time goes"). This kernel streams the weight once in one launch:

    program p owns output columns [p * BLOCK_N, (p + 1) * BLOCK_N), i.e. BLOCK_N contiguous weight rows,
    and walks K in BLOCK_K steps:   acc [16, BLOCK_N] += x [16, BLOCK_K] @ w [BLOCK_N, BLOCK_K]^T
    rows of x past M are masked to 0 (tl.dot needs 16 rows; the arithmetic is free, the bytes are w's)

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


# Few, different-shaped candidates: narrow tiles give a short projection (N = 3,584) enough programs to keep
# every SM streaming; wide ones suit the MLP and the LM head. The start-up timing picks among them.
CANDIDATES = (
    SkinnyTuning(16, 512, 4, 3),
    SkinnyTuning(16, 256, 4, 4),
    SkinnyTuning(32, 256, 4, 4),
    SkinnyTuning(32, 512, 8, 3),
    SkinnyTuning(64, 256, 8, 3),
)


def _skinny_kernel(
    x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, stride_wn, stride_om,
    HAS_BIAS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    offs_m = tl.arange(0, 16)
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_mask = offs_m < M
    n_mask = offs_n < N
    x_rows = x_ptr + offs_m[:, None] * stride_xm
    w_rows = w_ptr + offs_n[:, None].to(tl.int64) * stride_wn  # why int64: N * K passes 2**31 in an LM head
    acc = tl.zeros([16, BLOCK_N], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        k_mask = k < K
        x = tl.load(x_rows + k[None, :], mask=m_mask[:, None] & k_mask[None, :], other=0.0)  # [16, BLOCK_K]
        w = tl.load(w_rows + k[None, :], mask=n_mask[:, None] & k_mask[None, :], other=0.0)  # [BLOCK_N, BLOCK_K]
        acc = tl.dot(x, tl.trans(w), acc, input_precision=DOT_PRECISION)
    if HAS_BIAS:
        acc += tl.load(b_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=m_mask[:, None] & n_mask[None, :])


_skinny_kernel.do_not_specialize = ("M",)  # one compiled form for every row count


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
    n = weight.shape[0]
    out = _output(x, n, out)
    if x.shape[0] == 0 or n == 0:
        return out
    kernel = kernel_for(_skinny_kernel, x.device)
    kernel[(-(-n // tuning.block_n),)](
        x, weight, weight if bias is None else bias, out, x.shape[0], n, x.shape[1],
        x.stride(0), weight.stride(0), out.stride(0),
        HAS_BIAS=bias is not None, BLOCK_N=tuning.block_n, BLOCK_K=tuning.block_k,
        DOT_PRECISION="ieee" if x.dtype == torch.float32 else "tf32",
        num_warps=tuning.num_warps, num_stages=tuning.num_stages,
    )  # fmt: skip
    return out


def skinny_linear_reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Torch version of `skinny_linear` (cuBLAS on a GPU)."""
    _check(x, weight, bias)
    return F.linear(x, weight, bias)
