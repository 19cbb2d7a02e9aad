"""Dispatch with use_triton=True under Triton's interpreter (run by test_kernel_interpreter.py)."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # why: must precede triton's import (see kernels/_triton.py)

import pytest
import torch
from kernel_factories import make_paged_kv, make_query, query_start_loc, rel_error

from kernels import decode_attention, dispatch, plan_prefill, prefill_attention, write_kv
from kernels.paged_prefill import PREFIXED_TUNING, SHORT_TUNING


@pytest.mark.parametrize("clip", [None, 0.5])
@pytest.mark.parametrize("flash_min_len", [1, 10, 1000])
def test_prefill_attention_mixes_flash_and_short_paths(clip: float | None, flash_min_len: int) -> None:
    q_lens, lens = [12, 3, 0, 40, 1], [20, 3, 9, 40, 17]  # includes a sequence with no rows this step
    kv = make_paged_kv(lens, block_size=4, num_kv_heads=2, head_dim=16, cache_dtype=torch.float32)
    query = make_query(sum(q_lens), 8, 16, torch.float32)
    args = (query, kv.k_cache, kv.v_cache, kv.block_tables, query_start_loc(q_lens), kv.context_lens)
    fast = prefill_attention(*args, scale=0.25, qk_clip=clip, flash_min_len=flash_min_len, use_triton=True)
    ref = prefill_attention(*args, scale=0.25, qk_clip=clip, flash_min_len=flash_min_len, use_triton=False)
    assert rel_error(fast, ref) < 1e-5


def test_decode_attention_triton_matches_torch() -> None:
    kv = make_paged_kv([30, 9], block_size=16, num_kv_heads=2, head_dim=16, cache_dtype=torch.float32)
    query = make_query(2, 8, 16, torch.float32)
    outs = [
        decode_attention(query, *kv, scale=0.25, qk_clip=0.3, split_kv_min_len=8, use_triton=flag)
        for flag in (True, False)
    ]
    assert rel_error(*outs) < 1e-5


def test_write_kv_triton_equals_torch() -> None:
    kv = make_paged_kv([8, 8], block_size=4, num_kv_heads=2, head_dim=16, cache_dtype=torch.float32)
    key, value = make_query(3, 2, 16, torch.float32, seed=4), make_query(3, 2, 16, torch.float32, seed=5)
    caches = [(kv.k_cache.clone(), kv.v_cache.clone()) for _ in range(2)]
    for (k_cache, v_cache), flag in zip(caches, (True, False)):
        write_kv(key, value, k_cache, v_cache, torch.tensor([1, 6, 13]), use_triton=flag)
    assert torch.equal(caches[0][0], caches[1][0])
    assert torch.equal(caches[0][1], caches[1][1])


def test_a_plan_built_once_gives_the_same_output_and_reads_nothing_back_from_the_device(monkeypatch) -> None:
    """The runtime plans a step's prefill paths once (`plan_prefill`, from host lists); each layer's call then
    reads nothing back from the device: no `.tolist()` or `.item()` per layer."""
    q_lens, lens = [12, 3, 0, 40, 1, 2], [20, 3, 9, 40, 17, 30]  # flash, short, empty, flash, short, short
    kv = make_paged_kv(lens, block_size=4, num_kv_heads=2, head_dim=16, cache_dtype=torch.float32)
    query = make_query(sum(q_lens), 8, 16, torch.float32)
    qsl = query_start_loc(q_lens)
    args = (query, kv.k_cache, kv.v_cache, kv.block_tables, qsl, kv.context_lens)
    plan = plan_prefill(qsl.tolist(), kv.context_lens.tolist(), 10, query.device)
    assert not plan.all_flash and plan.flash.seqs.tolist() == [0, 3] and plan.short.seqs.tolist() == [1, 4, 5]
    assert (plan.short.padded_rows.tolist(), plan.short.keep.tolist(), plan.short.max_ctx) == (
        [[12, 13, 14], [55, 55, 55], [56, 57, 57]], [0, 1, 2, 3, 6, 7], 30)
    unplanned = prefill_attention(*args, scale=0.25, qk_clip=None, flash_min_len=10, use_triton=True)
    for name in ("tolist", "item"):
        monkeypatch.setattr(torch.Tensor, name, _forbidden)
    planned = prefill_attention(*args, scale=0.25, qk_clip=None, flash_min_len=10, use_triton=True, plan=plan)
    monkeypatch.undo()
    assert torch.equal(planned, unplanned)
    ref = prefill_attention(*args, scale=0.25, qk_clip=None, flash_min_len=10, use_triton=False)
    assert rel_error(planned, ref) < 1e-5


@pytest.mark.parametrize(("flash_min_len", "tuning"), [(1, PREFIXED_TUNING), (10, SHORT_TUNING)])
def test_the_flash_launch_takes_the_plans_tuning(monkeypatch, flash_min_len: int, tuning) -> None:
    """Chunks after long cached prefixes: all flash, the batch is prefixed (PREFIXED_TUNING, which the kernel
    cannot tell from the device lengths without a sync); with flash_min_len 10 the flash sub-batch is the fresh
    12-token prompt alone (SHORT_TUNING), the 3- and 2-token chunks going to SDPA."""
    q_lens, lens = [12, 3, 2], [12, 200, 150]
    kv = make_paged_kv(lens, block_size=16, num_kv_heads=2, head_dim=16, cache_dtype=torch.float32)
    query = make_query(sum(q_lens), 8, 16, torch.float32)
    qsl = query_start_loc(q_lens)
    args = (query, kv.k_cache, kv.v_cache, kv.block_tables, qsl, kv.context_lens)
    plan = plan_prefill(qsl.tolist(), kv.context_lens.tolist(), flash_min_len, query.device)
    assert plan.tuning is tuning
    launched, real = [], dispatch.paged_prefill

    def spy(*a, **kw):
        launched.append(kw["tuning"])
        return real(*a, **kw)

    monkeypatch.setattr(dispatch, "paged_prefill", spy)
    out = prefill_attention(*args, scale=0.25, qk_clip=None, flash_min_len=flash_min_len, use_triton=True, plan=plan)
    assert launched == [tuning]
    ref = prefill_attention(*args, scale=0.25, qk_clip=None, flash_min_len=flash_min_len, use_triton=False)
    assert rel_error(out, ref) < 1e-5


def _forbidden(*_args, **_kwargs):
    raise AssertionError("read back from the device inside a planned prefill_attention")


@pytest.mark.parametrize("use_triton", [True, False])
@pytest.mark.parametrize("flash_min_len", [1, 10])
def test_attention_writes_into_a_given_view_the_values_it_returns(use_triton: bool, flash_min_len: int) -> None:
    """`out=`: the kernels write the step's attention output in place (a view of a larger buffer, as the
    runtime passes), the values of the call without it; the rest of the buffer is untouched."""
    kv = make_paged_kv([30, 9], block_size=4, num_kv_heads=2, head_dim=16, cache_dtype=torch.float32)
    query = make_query(2, 8, 16, torch.float32)
    buffer = torch.full((5, 8, 16), 7.0)
    decode_args = (query, *kv)
    expected = decode_attention(*decode_args, scale=0.25, qk_clip=None, split_kv_min_len=8, use_triton=use_triton)
    got = decode_attention(*decode_args, scale=0.25, qk_clip=None, split_kv_min_len=8, use_triton=use_triton,
                           out=buffer[1:3])
    assert got.data_ptr() == buffer[1:3].data_ptr() and torch.equal(buffer[1:3], expected)
    assert (buffer[0] == 7).all() and (buffer[3:] == 7).all()
    q_lens = [12, 3]
    query = make_query(15, 8, 16, torch.float32, seed=3)
    args = (query, kv.k_cache, kv.v_cache, kv.block_tables, query_start_loc(q_lens), kv.context_lens)
    expected = prefill_attention(*args, scale=0.25, qk_clip=None, flash_min_len=flash_min_len, use_triton=use_triton)
    buffer = torch.full((17, 8, 16), 7.0)
    prefill_attention(*args, scale=0.25, qk_clip=None, flash_min_len=flash_min_len, use_triton=use_triton,
                      out=buffer[2:])
    assert torch.equal(buffer[2:], expected) and (buffer[:2] == 7).all()


def test_attention_refuses_an_out_of_another_shape() -> None:
    kv = make_paged_kv([30, 9], block_size=4, num_kv_heads=2, head_dim=16, cache_dtype=torch.float32)
    with pytest.raises(ValueError, match=r"paged_decode: out must be \(2, 8, 16\)"):
        decode_attention(make_query(2, 8, 16, torch.float32), *kv, scale=0.25, qk_clip=None, split_kv_min_len=8,
                         use_triton=True, out=torch.empty(3, 8, 16))
