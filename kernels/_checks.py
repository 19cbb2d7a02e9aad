"""Argument checks shared by the kernel wrappers: shapes, dtypes, devices and strides.

Every check reads tensor metadata only (no device values), so a wrapper never synchronizes with
the GPU and stays usable inside CUDA-graph capture.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

__all__ = [
    "CACHE_DTYPES",
    "FP8_MAX",
    "CacheGeometry",
    "check_cache_pair",
    "check_clip",
    "check_index",
    "check_query",
]

# Cache dtypes the kernels read and write; fp8 is upcast on load and cast down (saturated) on write.
CACHE_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn)
QUERY_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
FP8_MAX = 448.0  # largest finite float8_e4m3fn; writes saturate here instead of turning into NaN


class CacheGeometry(NamedTuple):
    num_blocks: int
    block_size: int
    num_kv_heads: int
    head_dim: int


def _fail(op: str, message: str) -> None:
    raise ValueError(f"{op}: {message}")


def check_cache_pair(op: str, k_cache: torch.Tensor, v_cache: torch.Tensor) -> CacheGeometry:
    """k_cache, v_cache: [num_blocks, block_size, num_kv_heads, head_dim], same dtype and device."""
    if k_cache.dim() != 4:
        _fail(op, f"k_cache must be [num_blocks, block_size, num_kv_heads, head_dim], got {tuple(k_cache.shape)}")
    if v_cache.shape != k_cache.shape:
        _fail(op, f"v_cache shape {tuple(v_cache.shape)} differs from k_cache shape {tuple(k_cache.shape)}")
    if k_cache.dtype not in CACHE_DTYPES or v_cache.dtype != k_cache.dtype:
        _fail(op, f"k/v caches must share one dtype of {CACHE_DTYPES}, got {k_cache.dtype}/{v_cache.dtype}")
    if v_cache.device != k_cache.device:
        _fail(op, f"k_cache is on {k_cache.device} but v_cache is on {v_cache.device}")
    if k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        _fail(op, "k/v caches need a contiguous last (head_dim) dimension")
    return CacheGeometry(*k_cache.shape)


def check_query(op: str, query: torch.Tensor, geometry: CacheGeometry, device: torch.device) -> int:
    """query: [N, Hq, D] on the cache's device; returns the GQA group size Hq // Hkv."""
    if query.dim() != 3:
        _fail(op, f"query must be [tokens_or_batch, num_q_heads, head_dim], got {tuple(query.shape)}")
    if query.dtype not in QUERY_DTYPES:
        _fail(op, f"query dtype must be one of {QUERY_DTYPES}, got {query.dtype}")
    if query.device != device:
        _fail(op, f"query is on {query.device} but the cache is on {device}")
    if query.stride(-1) != 1:
        _fail(op, "query needs a contiguous last (head_dim) dimension")
    num_heads, head_dim = query.shape[1], query.shape[2]
    if head_dim != geometry.head_dim:
        _fail(op, f"query head_dim {head_dim} != cache head_dim {geometry.head_dim}")
    if num_heads % geometry.num_kv_heads != 0:
        _fail(op, f"num_q_heads {num_heads} is not a multiple of num_kv_heads {geometry.num_kv_heads}")
    return num_heads // geometry.num_kv_heads


def output_for(op: str, query: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """The tensor an attention writes: `out` (checked: the query's shape, dtype and device, a contiguous last
    dimension; a view of a larger buffer is fine) or a new one."""
    if out is None:
        return torch.empty_like(query)
    if out.shape != query.shape or out.dtype != query.dtype or out.device != query.device:
        _fail(op, f"out must be {tuple(query.shape)} {query.dtype} on {query.device}, got {tuple(out.shape)} "
                  f"{out.dtype} on {out.device}")
    if out.numel() and out.stride(-1) != 1:
        _fail(op, "out needs a contiguous last (head_dim) dimension")
    return out


def check_index(
    op: str, name: str, t: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device
) -> None:
    """An index tensor (block tables, lengths, slots) of exact shape and dtype, row-contiguous."""
    if tuple(t.shape) != shape:
        _fail(op, f"{name} must have shape {shape}, got {tuple(t.shape)}")
    if t.dtype != dtype:
        _fail(op, f"{name} must be {dtype}, got {t.dtype}")
    if t.device != device:
        _fail(op, f"{name} is on {t.device} but the cache is on {device}")
    if t.dim() > 0 and t.numel() > 0 and t.stride(-1) != 1:
        _fail(op, f"{name} needs a contiguous last dimension")


def check_clip(op: str, scale: float, qk_clip: float | None) -> None:
    if not (math.isfinite(scale) and scale > 0):
        _fail(op, f"scale must be a finite positive number, got {scale}")
    if qk_clip is not None and not (math.isfinite(qk_clip) and qk_clip > 0):
        _fail(op, f"qk_clip must be None or a finite positive number, got {qk_clip}")
