"""The gated MLP activation: silu(gate) * up from the fused gate/up projection's output.

    gate_up [T, 2I] = [gate | up]   ->   out [T, I] = silu(gate) * up

silu is computed in fp32 and rounded to the input dtype before the product (as torch's separate
`silu` then `*` do), so the kernel and the reference differ only where fp32 exp differs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels._triton import kernel_for, tl

__all__ = ["silu_and_mul", "silu_and_mul_reference"]

BLOCK = 1024  # columns per program


def _silu_and_mul_kernel(x_ptr, out_ptr, inter, stride_x, stride_o, BLOCK_I: tl.constexpr):
    token = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    mask = cols < inter
    gate = tl.load(x_ptr + token * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + token * stride_x + inter + cols, mask=mask, other=0.0)
    act = (gate / (1.0 + tl.exp(-gate))).to(up.dtype).to(tl.float32)
    tl.store(out_ptr + token * stride_o + cols, (act * up.to(tl.float32)).to(out_ptr.dtype.element_ty), mask=mask)


def _check(x: torch.Tensor) -> None:
    if x.dim() != 2 or x.shape[1] % 2:
        raise ValueError(f"silu_and_mul: input must be [tokens, 2 * intermediate], got {tuple(x.shape)}")
    if x.numel() and x.stride(-1) != 1:
        raise ValueError("silu_and_mul: input needs a contiguous last dimension")


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """Triton: x [T, 2I] -> [T, I]."""
    _check(x)
    inter = x.shape[1] // 2
    out = torch.empty(x.shape[0], inter, dtype=x.dtype, device=x.device)
    if x.shape[0] == 0:
        return out
    kernel = kernel_for(_silu_and_mul_kernel, x.device)
    kernel[(x.shape[0], -(-inter // BLOCK))](x, out, inter, x.stride(0), out.stride(0), BLOCK_I=BLOCK, num_warps=4)
    return out


def silu_and_mul_reference(x: torch.Tensor) -> torch.Tensor:
    """Torch version of `silu_and_mul`."""
    _check(x)
    gate, up = x.split(x.shape[1] // 2, dim=-1)
    return F.silu(gate) * up
