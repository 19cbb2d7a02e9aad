"""The SDPA side of `bench_prefill_sdpa` computes what the paged kernel's reference computes (CPU, math backend)."""

import pytest
import torch

from experiments.bench_prefill_sdpa import chunk_queries, dense_kv, masks_for, sdpa_chunks, visible_mask
from kernels.paged_prefill import paged_prefill_reference

HEADS, KV_HEADS, D, PAGE = 4, 2, 16, 8


def _paged(seqs: int, length: int, prefix: int):
    g = torch.Generator().manual_seed(0)
    ctx = prefix + length
    pages = -(-ctx // PAGE)
    k_cache = torch.randn(seqs * pages, PAGE, KV_HEADS, D, generator=g)
    v_cache = torch.randn(seqs * pages, PAGE, KV_HEADS, D, generator=g)
    tables = torch.randperm(seqs * pages, generator=g).view(seqs, pages).to(torch.int32)
    query = torch.randn(seqs * length, HEADS, D, generator=g)
    qsl = torch.arange(0, seqs * length + 1, length, dtype=torch.int32)
    lens = torch.full((seqs,), ctx, dtype=torch.int32)
    return query, k_cache, v_cache, tables, qsl, lens


def test_visible_mask_is_causal_from_the_bottom_right() -> None:
    assert visible_mask(2, 4, torch.device("cpu")).tolist() == [[True, True, True, False], [True, True, True, True]]


@pytest.mark.parametrize(("seqs", "length", "prefix"), [(1, 12, 0), (2, 6, 0), (1, 5, 11), (2, 4, 9)])
def test_dense_sdpa_equals_the_paged_reference(seqs: int, length: int, prefix: int) -> None:
    inputs = _paged(seqs, length, prefix)
    query, k_cache, v_cache, tables, _, _ = inputs
    want = paged_prefill_reference(*inputs, scale=D**-0.5)
    q = chunk_queries(query, seqs)
    k, v = dense_kv(k_cache, tables, prefix + length), dense_kv(v_cache, tables, prefix + length)
    for mask in masks_for(prefix):
        got = sdpa_chunks(q, k, v, scale=D**-0.5, mask=mask).transpose(1, 2).reshape(query.shape)
        assert (got - want).abs().max().item() < 1e-5, mask


def test_the_paged_varlen_row_is_offered_only_where_torch_takes_pages_and_grouped_heads(monkeypatch) -> None:
    import torch.nn.attention.varlen as varlen

    from experiments.bench_prefill_sdpa import varlen_pages_available

    def like_torch_2_11(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, scale=None, window_size=(-1, -1)):
        raise AssertionError("not called")

    assert varlen_pages_available()  # this torch (2.13) has both
    monkeypatch.setattr(varlen, "varlen_attn", like_torch_2_11)
    assert not varlen_pages_available()
