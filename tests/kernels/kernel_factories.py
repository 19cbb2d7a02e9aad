"""Factories for the kernel tests: random paged caches with shuffled block tables.

Every tensor is random (never zeros); unused blocks and the table entries past a sequence's end hold
random data and random block ids too, so a kernel that reads outside its sequence shows up.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class PagedKV(NamedTuple):
    k_cache: torch.Tensor  # [num_blocks, block_size, Hkv, D]
    v_cache: torch.Tensor
    block_tables: torch.Tensor  # [B, max_blocks] int32
    context_lens: torch.Tensor  # [B] int32


def make_paged_kv(
    context_lens: list[int], *, block_size: int, num_kv_heads: int, head_dim: int,
    cache_dtype: torch.dtype, device: str = "cpu", seed: int = 0, spare_blocks: int = 3,
) -> PagedKV:  # fmt: skip
    gen = torch.Generator().manual_seed(seed)
    blocks_per_seq = [-(-n // block_size) for n in context_lens]
    max_blocks = max(blocks_per_seq) + 1  # one column past the longest sequence: never read
    num_blocks = sum(blocks_per_seq) + spare_blocks
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.randn(shape, generator=gen).to(cache_dtype)
    v_cache = torch.randn(shape, generator=gen).to(cache_dtype)
    order = torch.randperm(num_blocks, generator=gen)
    tables = torch.randint(0, num_blocks, (len(context_lens), max_blocks), generator=gen)
    used = 0
    for seq, n in enumerate(blocks_per_seq):
        tables[seq, :n] = order[used : used + n]
        used += n
    return PagedKV(
        k_cache.to(device),
        v_cache.to(device),
        tables.to(torch.int32).to(device),
        torch.tensor(context_lens, dtype=torch.int32, device=device),
    )


def make_query(
    num_rows: int, num_heads: int, head_dim: int, dtype: torch.dtype, device: str = "cpu", seed: int = 1
) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(num_rows, num_heads, head_dim, generator=gen).to(dtype).to(device)


def query_start_loc(q_lens: list[int], device: str = "cpu") -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32, device=device)


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()
