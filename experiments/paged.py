"""Paged K/V inputs for the attention benchmarks (`bench_decode`, `bench_split_kv`, `bench_vs_fa3`, `bench_prefill`),
on the GPU."""

from __future__ import annotations

import torch


def paged_inputs(batch: int, ctx: int, block_size: int, dtype: torch.dtype = torch.bfloat16, *, kv_heads: int,
                 head_dim: int, width: int | None = None):
    """(k_cache, v_cache, block_tables, context_lens) of `batch` sequences of `ctx` tokens on randomly placed
    blocks, as after a long serving run; `width`: table columns (default: just enough), the unused ones 0, as an
    engine's wider tables."""
    blocks_per_seq = -(-ctx // block_size)
    num_blocks = batch * blocks_per_seq
    k_cache = torch.randn(num_blocks, block_size, kv_heads, head_dim, device="cuda", dtype=torch.bfloat16).to(dtype)
    v_cache = torch.randn_like(k_cache, dtype=torch.bfloat16).to(dtype)
    tables = torch.zeros(batch, width or blocks_per_seq, device="cuda", dtype=torch.int32)
    tables[:, :blocks_per_seq] = torch.randperm(num_blocks, device="cuda").view(batch, blocks_per_seq)
    lens = torch.full((batch,), ctx, device="cuda", dtype=torch.int32)
    return k_cache, v_cache, tables, lens
