"""The skinny GEMM under Triton's interpreter, against torch's linear.

Run by test_kernel_interpreter.py in a subprocess.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # why: must precede triton's import (see kernels/_triton.py)

import pytest
import torch
import torch.nn.functional as F

from kernels.skinny_gemm import SkinnyTuning, skinny_linear

SMALL = SkinnyTuning(block_n=16, block_k=32, num_warps=4, num_stages=1)  # interpreter-sized tiles


def _randn(*shape: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.parametrize("rows", [1, 3, 16])
@pytest.mark.parametrize("with_bias", [False, True])
def test_skinny_linear_matches_torch_in_fp32(rows: int, with_bias: bool) -> None:
    # 37 outputs and 70 inputs: neither a multiple of the tile, so both masks act
    x, w = _randn(rows, 70, seed=1), _randn(37, 70, seed=2)
    bias = _randn(37, seed=3) if with_bias else None
    out = skinny_linear(x, w, bias, tuning=SMALL)
    torch.testing.assert_close(out, F.linear(x, w, bias), rtol=1e-5, atol=1e-5)


def test_skinny_linear_in_fp16_is_within_one_rounding_of_torch() -> None:
    x, w, bias = _randn(2, 96, seed=4, dtype=torch.float16), _randn(40, 96, seed=5, dtype=torch.float16), None
    expected = F.linear(x.float(), w.float()).half()
    torch.testing.assert_close(skinny_linear(x, w, bias, tuning=SMALL), expected, rtol=2e-3, atol=2e-3)


def test_a_row_comes_out_the_same_whatever_rows_share_its_call() -> None:
    """The padded rows never enter another row's dot: one sequence's logits do not depend on the batch."""
    x, w = _randn(5, 64, seed=6), _randn(48, 64, seed=7)
    alone = skinny_linear(x[2:3], w, tuning=SMALL)
    together = skinny_linear(x, w, tuning=SMALL)
    assert torch.equal(alone[0], together[2])


def test_skinny_linear_writes_into_a_view_of_a_larger_buffer() -> None:
    x, w, bias = _randn(3, 64, seed=8), _randn(20, 64, seed=9), _randn(20, seed=10)
    buffer = torch.full((3, 50), 7.0)
    out = skinny_linear(x, w, bias, tuning=SMALL, out=buffer[:, 10:30])
    assert out.data_ptr() == buffer[:, 10:30].data_ptr()
    torch.testing.assert_close(buffer[:, 10:30], F.linear(x, w, bias), rtol=1e-5, atol=1e-5)
    assert torch.equal(buffer[:, :10], torch.full((3, 10), 7.0))
    assert torch.equal(buffer[:, 30:], torch.full((3, 20), 7.0))


def test_linear_layer_routes_its_picked_buckets_to_the_skinny_kernel() -> None:
    """`runtime.model.linear.Linear` with a pick for 2-row calls: those run the kernel (the same values as
    `skinny_linear`), 16-row calls stay torch's."""
    from runtime.model.linear import Linear, SkinnyPicks

    torch.manual_seed(0)
    layer = Linear(64, 24, bias=True)
    layer.skinny = SkinnyPicks((None, SMALL, None, None, None))
    x2, x16 = _randn(2, 64, seed=11), _randn(16, 64, seed=12)
    with torch.no_grad():
        assert torch.equal(layer(x2), skinny_linear(x2, layer.weight, layer.bias, tuning=SMALL))
        assert torch.equal(layer(x16), F.linear(x16, layer.weight, layer.bias))


SPLIT = SkinnyTuning(block_n=16, block_k=16, num_warps=4, num_stages=1, split_k=3)  # 3 slices of K


@pytest.mark.parametrize("rows", [1, 5])
@pytest.mark.parametrize("with_bias", [False, True])
def test_split_k_matches_torch_in_fp32(rows: int, with_bias: bool) -> None:
    # K = 70: slices of 32 (two 16-column steps each), the last one 6 columns; 37 outputs over three column blocks
    x, w = _randn(rows, 70, seed=13), _randn(37, 70, seed=14)
    bias = _randn(37, seed=15) if with_bias else None
    torch.testing.assert_close(skinny_linear(x, w, bias, tuning=SPLIT), F.linear(x, w, bias), rtol=1e-5, atol=1e-5)


def test_split_k_with_more_slices_than_k_steps_leaves_the_empty_ones_at_zero() -> None:
    """K = 20 in 16-column steps over 3 slices: slice 0 holds 16 columns, slice 1 the last 4, slice 2 none."""
    x, w = _randn(2, 20, seed=16), _randn(18, 20, seed=17)
    torch.testing.assert_close(skinny_linear(x, w, tuning=SPLIT), F.linear(x, w), rtol=1e-5, atol=1e-5)


def test_split_k_sums_in_split_order_so_a_row_does_not_depend_on_the_others() -> None:
    x, w, bias = _randn(6, 64, seed=18), _randn(40, 64, seed=19), _randn(40, seed=20)
    together = skinny_linear(x, w, bias, tuning=SPLIT)
    for row in range(6):
        assert torch.equal(skinny_linear(x[row:row + 1], w, bias, tuning=SPLIT)[0], together[row])


def test_split_k_writes_into_a_view_of_a_larger_buffer_in_fp16() -> None:
    x, w = _randn(3, 48, seed=21, dtype=torch.float16), _randn(20, 48, seed=22, dtype=torch.float16)
    buffer = torch.full((3, 30), 7.0, dtype=torch.float16)
    skinny_linear(x, w, tuning=SPLIT, out=buffer[:, 5:25])
    torch.testing.assert_close(buffer[:, 5:25], F.linear(x.float(), w.float()).half(), rtol=2e-3, atol=2e-3)
    assert torch.equal(buffer[:, :5], torch.full((3, 5), 7.0, dtype=torch.float16))
    assert torch.equal(buffer[:, 25:], torch.full((3, 5), 7.0, dtype=torch.float16))
