"""The FA4 prefill path on the CPU: when it may run, and that it hands FlashAttention's varlen call the runtime's
paged arguments. FlashAttention 4 itself runs only on a Hopper or Blackwell GPU (`test_kernel_gpu.py` checks it
there against the reference); here a stand-in with FlashAttention's documented semantics takes its place."""

from __future__ import annotations

import re
import sys
import types

import pytest
import torch
from kernel_factories import make_paged_kv, make_query, query_start_loc

import kernels.fa4_prefill as fa4
from kernels import paged_prefill_reference, prefill_attention
from kernels.prefill_plan import plan_prefill

CUDA = torch.device("cuda")  # constructing a device needs no GPU


def flash_varlen_standin(calls: list[dict]):
    """FlashAttention's `flash_attn_varlen_func` on paged K/V, in torch: chunk b's queries are rows
    cu_seqlens_q[b]:[b+1]; its keys the first seqused_k[b] positions of its pages; causal aligned to the bottom
    right. Returns (out, lse) as FlashAttention does, and records each call's keywords."""

    def varlen(q, k, v, *, cu_seqlens_q, seqused_k, page_table, max_seqlen_q, max_seqlen_k, softmax_scale, causal):
        calls.append(dict(max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, causal=causal))
        out = torch.empty_like(q)
        group = q.shape[1] // k.shape[2]
        for b in range(page_table.shape[0]):
            lo, hi, n = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1]), int(seqused_k[b])
            keys = k[page_table[b].long()].flatten(0, 1)[:n].float().repeat_interleave(group, 1)  # [n, Hq, D]
            values = v[page_table[b].long()].flatten(0, 1)[:n].float().repeat_interleave(group, 1)
            scores = torch.einsum("qhd,khd->hqk", q[lo:hi].float(), keys) * softmax_scale
            visible = torch.arange(n)[None, :] <= torch.arange(n - (hi - lo), n)[:, None]
            weights = scores.masked_fill(~visible, float("-inf")).softmax(-1)
            out[lo:hi] = torch.einsum("hqk,khd->qhd", weights, values).to(q.dtype)
        return out, None

    return varlen


@pytest.fixture
def standin(monkeypatch) -> list[dict]:
    calls: list[dict] = []
    monkeypatch.setattr(fa4, "_varlen", lambda: flash_varlen_standin(calls))
    return calls


def _inputs(q_lens: list[int], lens: list[int]):
    kv = make_paged_kv(lens, block_size=8, num_kv_heads=2, head_dim=16, cache_dtype=torch.float32)
    query = make_query(sum(q_lens), 4, 16, torch.float32)
    return query, kv.k_cache, kv.v_cache, kv.block_tables, query_start_loc(q_lens), kv.context_lens


def test_the_runtime_arguments_give_the_reference_and_the_bounds_are_the_hosts(standin) -> None:
    q_lens, lens = [5, 12, 1], [21, 12, 9]  # a chunk after 16 cached, a fresh prompt, one token after 8
    args = _inputs(q_lens, lens)
    out = torch.zeros_like(args[0])
    got = fa4.fa4_paged_prefill(*args, scale=0.25, max_q=12, max_k=21, out=out)
    assert got is out
    assert (got - paged_prefill_reference(*args, scale=0.25)).abs().max().item() < 1e-5
    assert standin == [dict(max_seqlen_q=12, max_seqlen_k=21, causal=True)]


@pytest.mark.parametrize("flash_min_len", [1, 4])  # every chunk by FA4; or the 1-token chunk by SDPA beside it
def test_the_dispatch_sends_the_flash_chunks_to_fa4(standin, flash_min_len: int) -> None:
    q_lens, lens = [5, 12, 1], [21, 12, 9]
    args = _inputs(q_lens, lens)
    plan = plan_prefill(args[4].tolist(), lens, flash_min_len, torch.device("cpu"), 8)
    got = prefill_attention(*args, scale=0.25, qk_clip=None, flash_min_len=flash_min_len, use_triton=True,
                            plan=plan, kernel="fa4")
    assert (got - paged_prefill_reference(*args, scale=0.25)).abs().max().item() < 1e-5
    assert standin == [dict(max_seqlen_q=12, max_seqlen_k=21, causal=True)]  # one launch, the batch's bounds


def test_unavailable_says_why(monkeypatch, standin) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    bf16 = torch.bfloat16
    assert fa4.unavailable(torch.device("cpu"), bf16, None) == "needs a CUDA device, this engine runs on cpu"
    assert fa4.unavailable(CUDA, bf16, None) is None
    assert fa4.unavailable(CUDA, torch.float8_e4m3fn, None) == (
        "reads bf16 or fp16 caches, this one is torch.float8_e4m3fn (cache.kv_cache_dtype)")
    assert fa4.unavailable(CUDA, bf16, 30.0) == "has no QK clamp (kernel.qk_clip): its softcap is tanh"
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    assert fa4.unavailable(CUDA, bf16, None) == (
        "needs compute capability 9.x or 10.x (Hopper, Blackwell), this GPU is 8.0")


def test_without_the_package_it_says_how_to_install(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setitem(sys.modules, "flash_attn", None)  # as on this machine, where FA4 is not a requirement
    assert fa4.unavailable(CUDA, torch.bfloat16, None) == f"flash_attn.cute is not installed: {fa4.INSTALL}"
    with pytest.raises(ImportError, match=re.escape(f"flash_attn.cute is not installed: {fa4.INSTALL}")):
        fa4.fa4_paged_prefill(*_inputs([3], [3]), scale=0.25, max_q=3, max_k=3)


def test_a_package_that_does_not_import_says_why(monkeypatch) -> None:
    """An install of the wrong build fails inside its own imports: the line carries that error, not "install"."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    broken = types.ModuleType("flash_attn.cute")
    monkeypatch.setitem(sys.modules, "flash_attn", types.ModuleType("flash_attn"))
    monkeypatch.setitem(sys.modules, "flash_attn.cute", broken)  # no flash_attn_varlen_func in it
    assert fa4.unavailable(CUDA, torch.bfloat16, None) == (
        "flash_attn.cute does not import: ImportError: cannot import name 'flash_attn_varlen_func' from "
        "'flash_attn.cute' (unknown location)")

