"""Rotary position embedding applied to the query and key heads of one step, in place.

For each token t and head h, with x = [x1 | x2] split at half the head dim:

    out = [x1 * cos[p, :D/2] - x2 * sin[p, :D/2]  |  x2 * cos[p, D/2:] + x1 * sin[p, D/2:]]

(the "rotate half" convention of Llama in transformers), where p is the token's row of cos/sin: its position
when `positions` is given (cos/sin are then tables over every position, read by the kernel itself, so a step
computes no angle), else t. One launch rotates q and k together when they are one view: the first Hq + Hkv
heads of a fused q | k | v projection. The Triton kernel computes each element in
fp32 and rounds once; the torch reference rounds after each product, as the unfused model does, so
the two may differ by one unit in the last place of the input dtype.
"""

from __future__ import annotations

import torch

from kernels._triton import kernel_for, next_power_of_2, tl

__all__ = ["apply_rotary", "apply_rotary_reference"]


def _rotary_kernel(
    x_ptr, cos_ptr, sin_ptr, pos_ptr, num_heads,
    stride_xt, stride_xh, stride_ct, stride_st,
    HALF: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr, USE_POS: tl.constexpr,
):  # fmt: skip
    token = tl.program_id(0)
    if USE_POS:
        row = tl.load(pos_ptr + token)
    else:
        row = token
    heads = tl.arange(0, BLOCK_H)
    dims = tl.arange(0, BLOCK_HALF)
    d_mask = dims < HALF
    mask = (heads < num_heads)[:, None] & d_mask[None, :]
    cos1 = tl.load(cos_ptr + row * stride_ct + dims, mask=d_mask, other=0.0).to(tl.float32)[None, :]
    cos2 = tl.load(cos_ptr + row * stride_ct + HALF + dims, mask=d_mask, other=0.0).to(tl.float32)[None, :]
    sin1 = tl.load(sin_ptr + row * stride_st + dims, mask=d_mask, other=0.0).to(tl.float32)[None, :]
    sin2 = tl.load(sin_ptr + row * stride_st + HALF + dims, mask=d_mask, other=0.0).to(tl.float32)[None, :]
    first = x_ptr + token * stride_xt + heads[:, None] * stride_xh + dims[None, :]
    x1 = tl.load(first, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(first + HALF, mask=mask, other=0.0).to(tl.float32)
    tl.store(first, (x1 * cos1 - x2 * sin1).to(x_ptr.dtype.element_ty), mask=mask)
    tl.store(first + HALF, (x2 * cos2 + x1 * sin2).to(x_ptr.dtype.element_ty), mask=mask)


def _check(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor | None) -> None:
    if x.dim() != 3 or x.shape[-1] % 2:
        raise ValueError(f"apply_rotary: x must be [tokens, heads, head_dim], head_dim even, got {tuple(x.shape)}")
    if positions is not None and (positions.shape != (x.shape[0],) or positions.dtype != torch.int64
                                  or positions.device != x.device):
        raise ValueError(f"apply_rotary: positions must be int64 [{x.shape[0]}] on {x.device}, got "
                         f"{positions.dtype} {tuple(positions.shape)} on {positions.device}")
    rows = cos.shape[0] if positions is not None and cos.dim() == 2 else x.shape[0]  # a table: any length
    expected = (rows, x.shape[2])
    for name, t in (("cos", cos), ("sin", sin)):
        if tuple(t.shape) != expected or t.dtype != x.dtype or t.device != x.device:
            raise ValueError(f"apply_rotary: {name} must be {expected} {x.dtype} on {x.device}, got "
                             f"{tuple(t.shape)} {t.dtype} on {t.device}")
        if t.numel() and t.stride(-1) != 1:
            raise ValueError(f"apply_rotary: {name} needs a contiguous last dimension")
    if x.numel() and x.stride(-1) != 1:
        raise ValueError("apply_rotary: x needs a contiguous last (head_dim) dimension")


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                 positions: torch.Tensor | None = None) -> torch.Tensor:
    """Triton, in place: x [T, H, D] (a strided view of a fused projection is fine); cos/sin [T, D], or with
    `positions` (int64 [T], each below the tables' length: not checked, that would read the device) tables
    [P, D] indexed by them. Returns x."""
    _check(x, cos, sin, positions)
    if x.numel() == 0:
        return x
    half = x.shape[2] // 2
    kernel = kernel_for(_rotary_kernel, x.device)
    kernel[(x.shape[0],)](
        x, cos, sin, x if positions is None else positions, x.shape[1], x.stride(0), x.stride(1),
        cos.stride(0), sin.stride(0),
        HALF=half, BLOCK_H=next_power_of_2(x.shape[1]), BLOCK_HALF=next_power_of_2(half),
        USE_POS=positions is not None, num_warps=4,
    )  # fmt: skip
    return x


def apply_rotary_reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                           positions: torch.Tensor | None = None) -> torch.Tensor:
    """Torch version of `apply_rotary`, op for op transformers' `apply_rotary_pos_emb`; returns a new tensor."""
    _check(x, cos, sin, positions)
    if positions is not None:
        cos, sin = cos[positions], sin[positions]
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]
