"""Triton paged decode under Triton's interpreter (run by test_kernel_interpreter.py in a subprocess).

The interpreter's bf16 matmul is wrong in Triton 3.9, so these use fp32 and fp16 queries; bf16 is
covered on the GPU (test_kernel_gpu.py).
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # why: must precede triton's import (see kernels/_triton.py)

import pytest
import torch
from kernel_factories import make_paged_kv, make_query, rel_error

from kernels.paged_decode import DecodeTuning, launch_paged_decode, paged_decode, paged_decode_reference

SMALL = DecodeTuning(block_n=16, programs_per_sm=64, min_partition=16, num_warps=4, num_stages=1)  # many splits
F32, F16, FP8 = torch.float32, torch.float16, torch.float8_e4m3fn
TOLERANCE = {F32: 1e-5, F16: 3e-3}

CASES = [  # (query dtype, cache dtype, block_size, group, context lens, split_kv_min_len, qk_clip)
    (F32, F32, 1, 1, [3, 40], 10_000, None),
    (F32, F32, 4, 4, [1, 17, 64, 33], 10_000, None),
    (F32, F32, 4, 4, [1, 17, 64, 33], 20, None),
    (F32, F32, 16, 1, [70, 5, 16], 20, 0.4),
    (F32, F32, 16, 4, [70, 5, 16], 10_000, 0.4),
    (F32, F32, 1, 4, [45, 2], 8, 0.25),
    (F16, F16, 4, 4, [33, 64, 9], 20, None),
    (F16, FP8, 4, 4, [33, 64, 9], 20, None),
    (F32, FP8, 16, 1, [50, 3], 10_000, 0.5),
]


@pytest.mark.parametrize(("dtype", "cache_dtype", "block_size", "group", "lens", "split_min", "clip"), CASES)
def test_paged_decode_matches_reference(dtype, cache_dtype, block_size, group, lens, split_min, clip) -> None:
    kv = make_paged_kv(lens, block_size=block_size, num_kv_heads=2, head_dim=16, cache_dtype=cache_dtype)
    query = make_query(len(lens), 2 * group, 16, dtype)
    out = launch_paged_decode(query, *kv, scale=0.25, qk_clip=clip, split_kv_min_len=split_min, tuning=SMALL)
    ref = paged_decode_reference(query, *kv, scale=0.25, qk_clip=clip)
    assert out.dtype == dtype and out.shape == query.shape
    assert not out.isnan().any()
    assert rel_error(out, ref) < TOLERANCE[dtype]


def test_paged_decode_public_wrapper_with_default_tuning_and_head_dim_24() -> None:
    kv = make_paged_kv([130, 7, 64], block_size=8, num_kv_heads=1, head_dim=24, cache_dtype=F32)
    query = make_query(3, 2, 24, F32)
    for split_min in (2048, 16):
        out = paged_decode(query, *kv, scale=0.2, split_kv_min_len=split_min)
        assert rel_error(out, paged_decode_reference(query, *kv, scale=0.2)) < 1e-5


def test_split_and_unsplit_decode_agree() -> None:
    kv = make_paged_kv([100, 37], block_size=4, num_kv_heads=2, head_dim=16, cache_dtype=F32)
    query = make_query(2, 8, 16, F32)
    split = launch_paged_decode(query, *kv, scale=0.25, qk_clip=None, split_kv_min_len=1, tuning=SMALL)
    whole = launch_paged_decode(query, *kv, scale=0.25, qk_clip=None, split_kv_min_len=10_000, tuning=SMALL)
    assert rel_error(split, whole) < 1e-6


def test_a_wider_table_splits_as_its_max_context_says() -> None:
    """The engine's eager steps pass tables as wide as their batch needs, its CUDA graphs tables as wide as
    max_model_len: with the same `max_context` they split alike, so their values are bit for bit the same."""
    kv = make_paged_kv([100, 37], block_size=4, num_kv_heads=2, head_dim=16, cache_dtype=F32)
    k_cache, v_cache, tables, lens = kv
    wide = torch.cat([tables, torch.zeros(2, 40, dtype=tables.dtype)], dim=1)  # 40 more unused columns
    query = make_query(2, 8, 16, F32)
    run = lambda t, m: launch_paged_decode(query, k_cache, v_cache, t, lens, scale=0.25, qk_clip=None,
                                           split_kv_min_len=1, tuning=SMALL, max_context=m)
    bound = wide.shape[1] * 4
    assert torch.equal(run(tables, bound), run(wide, bound))
    assert torch.equal(run(wide, None), run(wide, bound))
