"""RMSNorm with the residual add fused in: one read of each input row, one write of each output.

    residual' = x + residual          (in the input dtype, as the unfused model rounds it)
    normed    = weight * (residual' * rsqrt(mean(residual'^2) + eps))   (fp32 inside, cast, then scaled)

Without a residual, `x` itself is normalised and returned as the residual. `residual_out` receives residual'
instead of a new tensor (it may be `residual` itself: each row is read before it is written), so a CUDA-graph
piece keeps the stream in its static buffer without a copy. The order of operations
is transformers' Llama RMSNorm: normalise in fp32, cast to the input dtype, multiply by the weight.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from kernels._triton import kernel_for, next_power_of_2, tl

__all__ = ["NormOutput", "rms_norm", "rms_norm_reference"]

NORM_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class NormOutput(NamedTuple):
    normed: torch.Tensor  # [T, H]: the input to the next sublayer
    residual: torch.Tensor  # [T, H]: the running residual stream (x + residual)


def _rms_norm_kernel(
    x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr, eps, hidden,
    stride_x, stride_r, stride_o, stride_ro,
    BLOCK_H: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_H)
    mask = cols < hidden
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(res_ptr + row * stride_r + cols, mask=mask, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(x_ptr.dtype.element_ty)  # rounded as the unfused add is
        tl.store(res_out_ptr + row * stride_ro + cols, x, mask=mask)
    x32 = x.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x32 * x32, 0) / hidden + eps)
    y = (x32 * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_o + cols, (y * w).to(out_ptr.dtype.element_ty), mask=mask)


def _check(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor | None,
           residual_out: torch.Tensor | None = None) -> None:
    if x.dim() != 2:
        raise ValueError(f"rms_norm: x must be [tokens, hidden], got {tuple(x.shape)}")
    if x.dtype not in NORM_DTYPES:
        raise ValueError(f"rms_norm: x dtype must be one of {NORM_DTYPES}, got {x.dtype}")
    if tuple(weight.shape) != (x.shape[1],) or weight.dtype != x.dtype or weight.device != x.device:
        raise ValueError(f"rms_norm: weight must be [{x.shape[1]}] {x.dtype} on {x.device}, got "
                         f"{tuple(weight.shape)} {weight.dtype} on {weight.device}")
    if residual is not None and (residual.shape != x.shape or residual.dtype != x.dtype or residual.device != x.device):
        raise ValueError(f"rms_norm: residual must match x ({tuple(x.shape)} {x.dtype} on {x.device}), got "
                         f"{tuple(residual.shape)} {residual.dtype} on {residual.device}")
    if residual_out is not None and (residual_out.shape != x.shape or residual_out.dtype != x.dtype
                                     or residual_out.device != x.device):
        raise ValueError(f"rms_norm: residual_out must match x ({tuple(x.shape)} {x.dtype} on {x.device}), got "
                         f"{tuple(residual_out.shape)} {residual_out.dtype} on {residual_out.device}")
    for name, t in (("x", x), ("weight", weight), ("residual", residual), ("residual_out", residual_out)):
        if t is not None and t.numel() and t.stride(-1) != 1:
            raise ValueError(f"rms_norm: {name} needs a contiguous last dimension")


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None, *,
             residual_out: torch.Tensor | None = None) -> NormOutput:
    """Triton: x, residual [T, H], weight [H] (all one dtype). New tensors out, the residual stream into
    `residual_out` when given; x untouched."""
    _check(x, weight, residual, residual_out)
    out = torch.empty_like(x)
    if residual is None:
        res_out = x if residual_out is None else residual_out.copy_(x)
    else:
        res_out = torch.empty_like(x) if residual_out is None else residual_out
    if x.shape[0] == 0:
        return NormOutput(out, res_out)
    block = next_power_of_2(x.shape[1])
    kernel = kernel_for(_rms_norm_kernel, x.device)
    r = residual if residual is not None else x
    kernel[(x.shape[0],)](
        x, r, weight, out, res_out, eps, x.shape[1], x.stride(0), r.stride(0), out.stride(0), res_out.stride(0),
        BLOCK_H=block, HAS_RESIDUAL=residual is not None, num_warps=min(16, max(1, block // 512)),
    )  # fmt: skip
    return NormOutput(out, res_out)


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None, *,
                       residual_out: torch.Tensor | None = None) -> NormOutput:
    """Torch version of `rms_norm`, op for op the unfused model's math."""
    _check(x, weight, residual, residual_out)
    if residual is not None:
        x = residual + x
    x32 = x.to(torch.float32)
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return NormOutput(weight * x32.to(x.dtype), x if residual_out is None else residual_out.copy_(x))
