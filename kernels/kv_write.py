"""KV-cache write: scatter each new token's K and V into its slot of the paged cache.

    slot_mapping[t] = block_id * block_size + offset   ->   k_cache[block_id, offset] = key[t]

`write_kv` is the Triton kernel (one program per token, all heads at once); `write_kv_reference`
is the same in torch. Both cast to the cache dtype; an fp8 (e4m3) cache saturates at +-448 rather
than storing NaN for larger values. Slots must lie in [0, num_blocks * block_size): the reference
raises on others, the kernel skips them rather than write outside the pool.
"""

from __future__ import annotations

import torch

from kernels._checks import FP8_MAX, CacheGeometry, check_cache_pair, check_index
from kernels._triton import kernel_for, next_power_of_2, tl

__all__ = ["write_kv", "write_kv_reference"]


def _write_kv_kernel(
    key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_ptr, num_slots,
    stride_kt, stride_kh, stride_vt, stride_vh,
    stride_kcb, stride_kco, stride_kch, stride_vcb, stride_vco, stride_vch,
    NUM_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, SATURATE: tl.constexpr,
):  # fmt: skip
    token = tl.program_id(0)
    slot = tl.load(slot_ptr + token)
    if (slot < 0) | (slot >= num_slots):
        return
    block = slot // BLOCK_SIZE
    offset = slot % BLOCK_SIZE
    heads = tl.arange(0, BLOCK_H)
    dims = tl.arange(0, BLOCK_D)
    mask = (heads < NUM_HEADS)[:, None] & (dims < HEAD_DIM)[None, :]  # [BLOCK_H, BLOCK_D]
    k = tl.load(key_ptr + token * stride_kt + heads[:, None] * stride_kh + dims[None, :], mask=mask)
    v = tl.load(value_ptr + token * stride_vt + heads[:, None] * stride_vh + dims[None, :], mask=mask)
    if SATURATE:
        k = tl.minimum(tl.maximum(k.to(tl.float32), -448.0), 448.0)
        v = tl.minimum(tl.maximum(v.to(tl.float32), -448.0), 448.0)
    k_dst = k_cache_ptr + block * stride_kcb + offset * stride_kco + heads[:, None] * stride_kch + dims[None, :]
    v_dst = v_cache_ptr + block * stride_vcb + offset * stride_vco + heads[:, None] * stride_vch + dims[None, :]
    tl.store(k_dst, k.to(k_cache_ptr.dtype.element_ty, fp_downcast_rounding="rtne"), mask=mask)
    tl.store(v_dst, v.to(v_cache_ptr.dtype.element_ty, fp_downcast_rounding="rtne"), mask=mask)


def _check_write_args(
    key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> CacheGeometry:
    geometry = check_cache_pair("write_kv", k_cache, v_cache)
    expected = (key.shape[0], geometry.num_kv_heads, geometry.head_dim)
    for name, t in (("key", key), ("value", value)):
        if tuple(t.shape) != expected:
            raise ValueError(f"write_kv: {name} must be [T, num_kv_heads, head_dim] = {expected}, got {tuple(t.shape)}")
        if t.device != k_cache.device:
            raise ValueError(f"write_kv: {name} is on {t.device} but the cache is on {k_cache.device}")
        if t.stride(-1) != 1:
            raise ValueError(f"write_kv: {name} needs a contiguous last (head_dim) dimension")
        if k_cache.dtype != torch.float8_e4m3fn and t.dtype != k_cache.dtype:
            raise ValueError(f"write_kv: {name} dtype {t.dtype} differs from the cache dtype {k_cache.dtype}")
    check_index("write_kv", "slot_mapping", slot_mapping, (key.shape[0],), torch.int64, k_cache.device)
    return geometry


def write_kv(
    key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    """Write key/value [T, Hkv, D] into the caches at slot_mapping [T] (int64), in place."""
    geometry = _check_write_args(key, value, k_cache, v_cache, slot_mapping)
    if key.shape[0] == 0:
        return
    kernel = kernel_for(_write_kv_kernel, k_cache.device)
    kernel[(key.shape[0],)](
        key, value, k_cache, v_cache, slot_mapping, geometry.num_blocks * geometry.block_size,
        key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        NUM_HEADS=geometry.num_kv_heads, HEAD_DIM=geometry.head_dim,
        BLOCK_H=next_power_of_2(geometry.num_kv_heads), BLOCK_D=next_power_of_2(geometry.head_dim),
        BLOCK_SIZE=geometry.block_size, SATURATE=k_cache.dtype == torch.float8_e4m3fn,
        num_warps=4,
    )  # fmt: skip


def _to_cache_dtype(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if dtype == torch.float8_e4m3fn:
        return x.float().clamp(-FP8_MAX, FP8_MAX).to(dtype)
    return x.to(dtype)


def write_kv_reference(
    key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    """Torch version of `write_kv`, same contract."""
    geometry = _check_write_args(key, value, k_cache, v_cache, slot_mapping)
    num_slots = geometry.num_blocks * geometry.block_size
    blocks, offsets = slot_mapping // geometry.block_size, slot_mapping % geometry.block_size
    # why CPU only: negative slots would silently index from the end; on CUDA the check would cost a sync
    on_cpu = slot_mapping.numel() > 0 and slot_mapping.device.type == "cpu"
    if on_cpu and (int(slot_mapping.min()) < 0 or int(slot_mapping.max()) >= num_slots):
        raise IndexError(f"write_kv_reference: slot_mapping has slots outside [0, {num_slots})")
    k_cache[blocks, offsets] = _to_cache_dtype(key, k_cache.dtype)
    v_cache[blocks, offsets] = _to_cache_dtype(value, v_cache.dtype)
