"""Torch helpers that read paged K/V back into dense tensors, and the explicit softmax they feed.

Slot arithmetic (the same in every kernel):

    position p of sequence b  ->  block  = block_tables[b, p // block_size]
                                  offset = p % block_size
                                  k_cache[block, offset]  # [Hkv, D]

Used by the torch references (exact fp32 math) and by the SDPA path of `dispatch`.
"""

from __future__ import annotations

import torch

__all__ = ["gather_kv", "gather_kv_padded", "masked_softmax_attend"]


def gather_kv(cache: torch.Tensor, block_table: torch.Tensor, length: int) -> torch.Tensor:
    """The first `length` positions of one sequence: [length, Hkv, D], in the cache's dtype."""
    block_size = cache.shape[1]
    positions = torch.arange(length, device=cache.device)
    blocks = block_table[positions // block_size].long()
    return cache[blocks, positions % block_size]


def gather_kv_padded(cache: torch.Tensor, block_tables: torch.Tensor, max_len: int) -> torch.Tensor:
    """Positions [0, max_len) of every sequence: [B, max_len, Hkv, D].

    Positions past a sequence's length read whatever block its table names there (clamped into the
    pool, since tables may hold anything past the end); callers mask them out.
    """
    num_blocks, block_size = cache.shape[0], cache.shape[1]
    positions = torch.arange(max_len, device=cache.device)
    table_cols = (positions // block_size).clamp(max=block_tables.shape[1] - 1)
    blocks = block_tables[:, table_cols].long().clamp(0, num_blocks - 1)  # [B, max_len]
    return cache[blocks, positions % block_size]


def masked_softmax_attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor, scale: float, qk_clip: float | None
) -> torch.Tensor:
    """Explicit attention in fp32 with GQA: the math every kernel is checked against.

    q: [..., Hkv, G, Lq, D]; k, v: [..., Hkv, Lk, D]; visible: bool, broadcastable to
    [..., Hkv, G, Lq, Lk]. Returns fp32 [..., Hkv, G, Lq, D].
    """
    scores = torch.matmul(q.float(), k.float().unsqueeze(-3).transpose(-1, -2)) * scale  # [..., Hkv, G, Lq, Lk]
    if qk_clip is not None:
        scores = scores.clamp(-qk_clip, qk_clip)
    scores = scores.masked_fill(~visible, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.matmul(probs, v.float().unsqueeze(-3))
