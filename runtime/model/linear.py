"""The model's projections: `nn.Linear`, except that a call of few rows may run the skinny Triton GEMM.

Which calls do is decided once, when an engine starts on a GPU (`runtime.skinny.pick_skinny` times each
weight shape against cuBLAS per row bucket) and kept on the layer as its `SkinnyPicks`; until then, and
always on CPU, every call is torch's (`F.linear`, or `mm`/`addmm` into a given output: the same GEMM).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from kernels.skinny_gemm import MAX_ROWS, SkinnyTuning, skinny_linear

__all__ = ["ROW_BUCKETS", "Linear", "SkinnyPicks"]

ROW_BUCKETS = (1, 2, 4, 8, MAX_ROWS)  # a call of M rows takes the picks of the smallest bucket >= M
# index M - 1: the bucket of a call of M rows
_BUCKET_OF = tuple(next(i for i, b in enumerate(ROW_BUCKETS) if b >= m) for m in range(1, MAX_ROWS + 1))


class SkinnyPicks(NamedTuple):
    """Per row bucket (`ROW_BUCKETS`), the skinny launch to use, or None for torch's GEMM."""

    by_bucket: tuple[SkinnyTuning | None, ...] = (None,) * len(ROW_BUCKETS)

    def tuning_for(self, rows: int) -> SkinnyTuning | None:
        if rows < 1 or rows > MAX_ROWS:
            return None
        return self.by_bucket[_BUCKET_OF[rows - 1]]  # every projection of every step asks: a lookup


class Linear(nn.Linear):
    """`nn.Linear` (same parameters and names) whose `skinny` picks may route few-row calls to Triton."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.skinny = SkinnyPicks()

    def forward(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """x [T, in] -> [T, out_features], written into `out` when given."""
        tuning = self.skinny.tuning_for(x.shape[0])
        if tuning is not None:
            return skinny_linear(x, self.weight, self.bias, tuning=tuning, out=out)
        if out is None:
            return F.linear(x, self.weight, self.bias)
        if self.bias is None:
            return torch.mm(x, self.weight.t(), out=out)
        return torch.addmm(self.bias, x, self.weight.t(), out=out)
