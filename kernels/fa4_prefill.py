"""Prefill attention by FlashAttention 4's CuTe-DSL kernels (`flash_attn.cute`, PyPI `flash-attn-4`), where that
optional package is installed: `kernel.prefill_kernel: fa4`.

Why: on Hopper the Triton prefill kernel (`paged_prefill`, a FlashAttention-2-style loop) reaches 340-420 TFLOP/s on
chunks after a cached prefix, where FlashAttention 3's wgmma pipeline reaches 540-570 (experiments/RESULTS.md,
"Attention against FlashAttention 3"); Triton's warp specialization and torch's cuDNN / flash SDPA do not close
that (the same page). FA4's forward has a Hopper (sm90) path of that design and reads the paged cache itself
(`page_table`), and it compiles its kernels at run time (CuTe DSL): no CUDA build travels with it.

It computes what `paged_prefill` computes, on the same arguments: chunk b's queries are the last q_len positions of
its context_lens[b] (FlashAttention's causal mask is aligned to the bottom right when a sequence has more keys than
queries), K/V read through the block table from [num_blocks, block_size, Hkv, D] pages. The torch reference is
`paged_prefill_reference`. Not with `qk_clip` (FlashAttention's softcap is tanh, not a clamp) nor an fp8 cache:
`unavailable` says so, and the engine refuses the knob at start with that reason.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from kernels._checks import check_cache_pair, check_index, check_query, output_for

__all__ = ["INSTALL", "fa4_paged_prefill", "unavailable"]

INSTALL = "pip install 'pagetune[fa4]' (experiments/fa4_wheelhouse.sh for an offline host)"
ARCHS = (9, 10)  # compute capability majors FA4's forward runs on: Hopper and Blackwell


def _varlen() -> Callable:
    """The installed `flash_attn.cute.flash_attn_varlen_func`; ImportError where it does not import."""
    try:
        from flash_attn.cute import flash_attn_varlen_func
    except ImportError as err:  # why: a missing package says how to install it; one of the wrong build says why
        if isinstance(err, ModuleNotFoundError) and (err.name or "").split(".")[0] == "flash_attn":
            raise ImportError(f"flash_attn.cute is not installed: {INSTALL}") from err
        raise ImportError(f"flash_attn.cute does not import: {type(err).__name__}: {err}") from err
    return flash_attn_varlen_func


def unavailable(device: torch.device, cache_dtype: torch.dtype, qk_clip: float | None) -> str | None:
    """Why FA4 cannot run this engine's prefill attention, or None where it can."""
    if device.type != "cuda":
        return f"needs a CUDA device, this engine runs on {device.type}"
    major, minor = torch.cuda.get_device_capability(device)
    if major not in ARCHS:
        return f"needs compute capability 9.x or 10.x (Hopper, Blackwell), this GPU is {major}.{minor}"
    if cache_dtype not in (torch.float16, torch.bfloat16):
        return f"reads bf16 or fp16 caches, this one is {cache_dtype} (cache.kv_cache_dtype)"
    if qk_clip is not None:
        return "has no QK clamp (kernel.qk_clip): its softcap is tanh"
    try:
        _varlen()
    except ImportError as err:
        return str(err)
    return None


def fa4_paged_prefill(
    query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    query_start_loc: torch.Tensor, context_lens: torch.Tensor, *, scale: float, max_q: int, max_k: int,
    out: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """Causal attention of B chunks over their paged contexts: query [T, Hq, D] -> [T, Hq, D] (see the module's
    docstring), written into `out` when given. `max_q`, `max_k`: the longest chunk and context (host integers,
    so the launch reads no length from the device)."""
    geometry = check_cache_pair("fa4_paged_prefill", k_cache, v_cache)
    check_query("fa4_paged_prefill", query, geometry, k_cache.device)
    batch = block_tables.shape[0]
    device = k_cache.device
    check_index("fa4_paged_prefill", "block_tables", block_tables, tuple(block_tables.shape), torch.int32, device)
    check_index("fa4_paged_prefill", "query_start_loc", query_start_loc, (batch + 1,), torch.int32, device)
    check_index("fa4_paged_prefill", "context_lens", context_lens, (batch,), torch.int32, device)
    if query.dtype != k_cache.dtype:
        raise ValueError(f"fa4_paged_prefill: query {query.dtype} and cache {k_cache.dtype} must share a dtype")
    target = None if out is None else output_for("fa4_paged_prefill", query, out)
    result, _ = _varlen()(query, k_cache, v_cache, cu_seqlens_q=query_start_loc, seqused_k=context_lens,
                       page_table=block_tables, max_seqlen_q=max_q, max_seqlen_k=max_k, softmax_scale=scale,
                       causal=True)
    return result if target is None else target.copy_(result)
