"""Triton KV write under Triton's interpreter (run by test_kernel_interpreter.py in a subprocess)."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # why: must precede triton's import (see kernels/_triton.py)

import pytest
import torch
from kernel_factories import make_query

from kernels.kv_write import write_kv, write_kv_reference


def _caches(num_blocks: int, block_size: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(7)
    shape = (num_blocks, block_size, 2, 16)
    return torch.randn(shape, generator=gen).to(dtype), torch.randn(shape, generator=gen).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_write_kv_puts_each_token_in_its_slot_and_nowhere_else(dtype: torch.dtype, block_size: int) -> None:
    k_cache, v_cache = _caches(5, block_size, dtype)
    num_slots = 5 * block_size
    slots = torch.randperm(num_slots, generator=torch.Generator().manual_seed(3))[:4]
    key, value = make_query(4, 2, 16, dtype, seed=11), make_query(4, 2, 16, dtype, seed=12)
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    expected_k.view(num_slots, 2, 16)[slots] = key
    expected_v.view(num_slots, 2, 16)[slots] = value
    write_kv(key, value, k_cache, v_cache, slots)
    assert torch.equal(k_cache, expected_k)
    assert torch.equal(v_cache, expected_v)


def test_write_kv_matches_reference_for_strided_qkv_views() -> None:
    qkv = make_query(6, 3 * 2, 16, torch.float32)  # [T, (q | k | v) heads, D], as a fused projection gives
    key, value = qkv[:, 2:4], qkv[:, 4:6]
    k1, v1 = _caches(4, 4, torch.float32)
    k2, v2 = k1.clone(), v1.clone()
    slots = torch.tensor([15, 0, 4, 9, 3, 8])
    write_kv(key, value, k1, v1, slots)
    write_kv_reference(key, value, k2, v2, slots)
    assert torch.equal(k1, k2)
    assert torch.equal(v1, v2)


def test_write_kv_fp8_stores_representable_values_exactly_and_saturates() -> None:
    # The interpreter's own fp8 rounding is inexact (Triton 3.9), so inputs are fp8-representable;
    # rounding of arbitrary values is checked on the GPU (test_kernel_gpu.py).
    k_cache, v_cache = _caches(3, 4, torch.float8_e4m3fn)
    key = make_query(3, 2, 16, torch.float32, seed=5).to(torch.float8_e4m3fn).to(torch.float16)
    value = make_query(3, 2, 16, torch.float32, seed=6).to(torch.float8_e4m3fn).to(torch.float16)
    value[0, 0, 0], value[1, 1, 1] = 1000.0, -1000.0  # past the fp8 range: stored as +-448
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    write_kv_reference(key, value, expected_k, expected_v, torch.tensor([2, 5, 11]))
    write_kv(key, value, k_cache, v_cache, torch.tensor([2, 5, 11]))
    assert torch.equal(k_cache.view(torch.uint8), expected_k.view(torch.uint8))
    assert torch.equal(v_cache.view(torch.uint8), expected_v.view(torch.uint8))
    assert v_cache.view(12, 2, 16)[2, 0, 0].item() == 448.0
    assert v_cache.view(12, 2, 16)[5, 1, 1].item() == -448.0


def test_write_kv_skips_slots_outside_the_pool() -> None:
    k_cache, v_cache = _caches(2, 4, torch.float32)
    before_k, before_v = k_cache.clone(), v_cache.clone()
    key = make_query(2, 2, 16, torch.float32)
    write_kv(key, key, k_cache, v_cache, torch.tensor([8, -1]))
    assert torch.equal(k_cache, before_k)
    assert torch.equal(v_cache, before_v)
