"""The torch references and the checked wrappers, in process (no Triton launch).

The references are checked here against torch SDPA on dense K/V (independent math); the Triton
kernels are checked against the references in interp_*.py (CPU) and test_kernel_gpu.py.
"""

from __future__ import annotations

import functools
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from kernel_factories import make_paged_kv, make_query, query_start_loc, rel_error

from kernels import (
    decode_attention,
    paged_decode,
    paged_decode_reference,
    paged_prefill,
    paged_prefill_reference,
    prefill_attention,
    write_kv,
    write_kv_reference,
)
from kernels._gather import gather_kv


def _dense(cache: torch.Tensor, table: torch.Tensor, length: int) -> torch.Tensor:
    return gather_kv(cache, table, length).transpose(0, 1)[None].double()  # [1, Hkv, L, D]


def test_decode_reference_equals_sdpa_on_dense_kv() -> None:
    kv = make_paged_kv([1, 20, 33], block_size=4, num_kv_heads=2, head_dim=16, cache_dtype=torch.float32)
    query = make_query(3, 8, 16, torch.float32)
    out = paged_decode_reference(query, *kv, scale=0.3)
    for seq, n in enumerate(kv.context_lens.tolist()):
        k, v = (_dense(c, kv.block_tables[seq], n) for c in (kv.k_cache, kv.v_cache))
        expected = F.scaled_dot_product_attention(query[seq][None, :, None].double(), k, v, scale=0.3, enable_gqa=True)
        assert rel_error(out[seq], expected[0, :, 0]) < 1e-6


def test_prefill_reference_equals_sdpa_with_prefix_mask() -> None:
    q_lens, lens = [6, 1, 9], [6, 12, 20]
    kv = make_paged_kv(lens, block_size=4, num_kv_heads=1, head_dim=16, cache_dtype=torch.float32)
    query = make_query(sum(q_lens), 2, 16, torch.float32)
    qsl = query_start_loc(q_lens)
    out = paged_prefill_reference(query, kv.k_cache, kv.v_cache, kv.block_tables, qsl, kv.context_lens, scale=0.3)
    for seq, (q_len, n) in enumerate(zip(q_lens, lens)):
        k, v = (_dense(c, kv.block_tables[seq], n) for c in (kv.k_cache, kv.v_cache))
        q = query[qsl[seq] : qsl[seq + 1]].transpose(0, 1)[None].double()
        visible = torch.arange(n)[None, :] <= torch.arange(n - q_len, n)[:, None]
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=visible, scale=0.3, enable_gqa=True)
        assert rel_error(out[qsl[seq] : qsl[seq + 1]], expected[0].transpose(0, 1)) < 1e-6


def test_qk_clip_clamps_scaled_scores() -> None:
    # One key far above the rest: unclipped it takes all the weight; clipped to +-1 it cannot.
    kv = make_paged_kv([4], block_size=4, num_kv_heads=1, head_dim=16, cache_dtype=torch.float32)
    kv.k_cache[kv.block_tables[0, 0], 0] = 100.0
    query = torch.ones(1, 1, 16)
    clipped = paged_decode_reference(query, *kv, scale=1.0, qk_clip=1.0)
    v = gather_kv(kv.v_cache, kv.block_tables[0], 4)[:, 0]  # [4, D]
    scores = (query[0] @ gather_kv(kv.k_cache, kv.block_tables[0], 4)[:, 0].T).clamp(-1.0, 1.0)
    assert torch.allclose(clipped[0], torch.softmax(scores, -1) @ v, atol=1e-6)
    assert not torch.allclose(clipped, paged_decode_reference(query, *kv, scale=1.0), atol=1e-3)


def test_write_kv_reference_fills_exact_slots_and_rejects_out_of_range() -> None:
    kv = make_paged_kv([8], block_size=4, num_kv_heads=2, head_dim=16, cache_dtype=torch.float32)
    before = kv.k_cache.clone()
    key = make_query(2, 2, 16, torch.float32, seed=9)
    write_kv(key, key * 2, kv.k_cache, kv.v_cache, torch.tensor([5, 2]), use_triton=False)
    assert torch.equal(kv.k_cache[1, 1], key[0]) and torch.equal(kv.k_cache[0, 2], key[1])
    assert torch.equal(kv.v_cache[1, 1], key[0] * 2)
    changed = (kv.k_cache != before).any(dim=(2, 3)).nonzero().tolist()
    assert changed == [[0, 2], [1, 1]]
    with pytest.raises(IndexError, match="outside"):
        write_kv_reference(key, key, kv.k_cache, kv.v_cache, torch.tensor([5, -1]))


def test_torch_dispatch_is_exactly_the_references() -> None:
    kv = make_paged_kv([9, 30], block_size=4, num_kv_heads=2, head_dim=16, cache_dtype=torch.float32)
    query = make_query(2, 4, 16, torch.float32)
    decode = decode_attention(query, *kv, scale=0.25, qk_clip=None, split_kv_min_len=1, use_triton=False)
    assert torch.equal(decode, paged_decode_reference(query, *kv, scale=0.25))
    rows = make_query(13, 4, 16, torch.float32)
    args = (rows, kv.k_cache, kv.v_cache, kv.block_tables, query_start_loc([4, 9]), kv.context_lens)
    prefill = prefill_attention(*args, scale=0.25, qk_clip=0.5, flash_min_len=1, use_triton=False)
    assert torch.equal(prefill, paged_prefill_reference(*args, scale=0.25, qk_clip=0.5))


@pytest.mark.parametrize("clip", [None, 0.7])
@pytest.mark.parametrize("cache_dtype", [torch.float32, torch.float8_e4m3fn])
def test_short_prefill_path_matches_reference(clip: float | None, cache_dtype: torch.dtype) -> None:
    # flash_min_len above every chunk: use_triton=True sends all of them to SDPA, no Triton launch.
    q_lens, lens = [3, 1, 7, 0], [3, 10, 21, 5]
    kv = make_paged_kv(lens, block_size=4, num_kv_heads=2, head_dim=16, cache_dtype=cache_dtype)
    query = make_query(sum(q_lens), 8, 16, torch.float32)
    args = (query, kv.k_cache, kv.v_cache, kv.block_tables, query_start_loc(q_lens), kv.context_lens)
    out = prefill_attention(*args, scale=0.25, qk_clip=clip, flash_min_len=64, use_triton=True)
    assert rel_error(out, paged_prefill_reference(*args, scale=0.25, qk_clip=clip)) < 1e-5


def _decode_args(**overrides):
    kv = make_paged_kv([9, 30], block_size=4, num_kv_heads=2, head_dim=16, cache_dtype=torch.float32)
    args = {
        "query": make_query(2, 4, 16, torch.float32),
        "k_cache": kv.k_cache,
        "v_cache": kv.v_cache,
        "block_tables": kv.block_tables,
        "context_lens": kv.context_lens,
        "scale": 0.25,
    }
    return {**args, **overrides}


@pytest.mark.parametrize(("override", "message"), [
    ({"query": torch.randn(2, 3, 16)}, "multiple of num_kv_heads"),
    ({"query": torch.randn(2, 4, 8)}, "head_dim"),
    ({"query": torch.randn(2, 4, 16, dtype=torch.float64)}, "query dtype"),
    ({"query": torch.randn(2, 16, 4).transpose(1, 2)}, "contiguous last"),
    ({"block_tables": torch.zeros(2, 9, dtype=torch.int64)}, "block_tables must be torch.int32"),
    ({"context_lens": torch.ones(3, dtype=torch.int32)}, r"context_lens must have shape \(2,\)"),
    ({"v_cache": torch.randn(14, 4, 2, 16, dtype=torch.float16)}, "share one dtype"),
    ({"k_cache": torch.randn(14, 4, 2, 32)[..., ::2]}, "contiguous last"),
    ({"scale": -1.0}, "scale"),
    ({"qk_clip": 0.0}, "qk_clip"),
])  # fmt: skip
def test_decode_wrappers_reject_bad_arguments(override: dict, message: str) -> None:
    triton = functools.partial(paged_decode, split_kv_min_len=2048)  # the reference has no split-KV threshold
    for fn in (triton, paged_decode_reference):
        with pytest.raises(ValueError, match=message):
            fn(**_decode_args(**override))


def test_prefill_wrappers_reject_bad_query_start_loc() -> None:
    kv = make_paged_kv([9, 30], block_size=4, num_kv_heads=2, head_dim=16, cache_dtype=torch.float32)
    query = make_query(5, 4, 16, torch.float32)
    for fn in (paged_prefill, paged_prefill_reference):
        with pytest.raises(ValueError, match=r"query_start_loc must have shape \(3,\)"):
            fn(
                query,
                kv.k_cache,
                kv.v_cache,
                kv.block_tables,
                torch.tensor([0, 5], dtype=torch.int32),
                kv.context_lens,
                scale=0.25,
            )


def test_import_kernels_and_run_torch_path_without_triton() -> None:
    script = (
        "import sys; sys.modules['triton'] = None\n"  # makes `import triton` raise ImportError
        "import torch, kernels\n"
        "assert not kernels.triton_available()\n"
        "q = torch.randn(1, 2, 16); k = torch.randn(2, 4, 1, 16)\n"
        "bt = torch.tensor([[1, 0]], dtype=torch.int32); n = torch.tensor([6], dtype=torch.int32)\n"
        "kernels.decode_attention(q, k, k, bt, n, scale=0.25, qk_clip=None, split_kv_min_len=1, use_triton=False)\n"
        "try:\n    kernels.paged_decode(q, k, k, bt, n, scale=0.25, split_kv_min_len=2048)\n"
        "except RuntimeError as e:\n    print(e)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "Triton is not usable here" in result.stdout
