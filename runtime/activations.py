"""Measure the forward pass's peak activation memory on CUDA (the term memory sizing subtracts)."""

from __future__ import annotations

import torch

from runtime.attention import AttentionMetadata, PrefillBatch, TierBatch
from runtime.config import KernelConfig
from runtime.model.llama import LlamaForCausalLM
from runtime.runner import allocate_caches

_PROFILE_BLOCK = 16


@torch.inference_mode()
def profile_activation_bytes(model: LlamaForCausalLM, num_tokens: int, num_seqs: int, max_model_len: int,
                             kernel: KernelConfig, use_triton: bool) -> int:
    """Peak bytes of one forward over `num_tokens` prompt tokens plus logits for `num_seqs` rows."""
    device = next(model.parameters()).device
    lens = [min(max_model_len, num_tokens - s) for s in range(0, num_tokens, max_model_len)]
    blocks = [-(-n // _PROFILE_BLOCK) for n in lens]
    caches = allocate_caches(model.layout, [_PROFILE_BLOCK], [sum(blocks)], model.lm_head.weight.dtype, device)
    first = [sum(blocks[:i]) for i in range(len(blocks))]
    width = max(blocks)
    tables = torch.tensor([[f + j if j < b else 0 for j in range(width)] for f, b in zip(first, blocks)],
                          dtype=torch.int32, device=device)
    slots = torch.cat([torch.arange(n, device=device) + f * _PROFILE_BLOCK for f, n in zip(first, lens)])
    qsl = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=device)
    ctx = torch.tensor(lens, dtype=torch.int32, device=device)
    rows = slice(0, num_tokens)
    tier = TierBatch(0, rows, slots, None, PrefillBatch(rows, tables, qsl, ctx))
    meta = AttentionMetadata.of((tier,), use_triton, kernel)
    ids = torch.zeros(num_tokens, dtype=torch.int64, device=device)
    positions = torch.cat([torch.arange(n, device=device) for n in lens])
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    hidden = model(ids, positions, meta, caches)
    model.compute_logits(hidden[: min(num_seqs, num_tokens)]).softmax(-1)
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - base
    del caches, hidden
    torch.cuda.empty_cache()
    return peak
