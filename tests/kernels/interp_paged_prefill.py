"""Triton paged prefill under Triton's interpreter (run by test_kernel_interpreter.py in a subprocess).

fp32 and fp16 queries only: the interpreter's bf16 matmul is wrong in Triton 3.9 (bf16 runs on the GPU).
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # why: must precede triton's import (see kernels/_triton.py)

import pytest
import torch
from kernel_factories import make_paged_kv, make_query, query_start_loc, rel_error

from kernels._checks import CacheGeometry
from kernels.paged_prefill import (
    PREFIXED_TUNING,
    PrefillTuning,
    _page_tma,
    default_tuning,
    launch_paged_prefill,
    paged_prefill,
    paged_prefill_reference,
)

SMALL = PrefillTuning(block_m=16, block_n=16, num_warps=4, num_stages=1)  # many tiles per sequence
F32, F16, FP8 = torch.float32, torch.float16, torch.float8_e4m3fn
TOLERANCE = {F32: 1e-5, F16: 3e-3}

CASES = [  # (query dtype, cache dtype, block_size, group, chunk lens, context lens, qk_clip)
    (F32, F32, 1, 1, [5, 37], [5, 37], None),  # fresh prompts
    (F32, F32, 4, 4, [5, 37, 16], [9, 50, 40], None),  # cached prefixes before each chunk
    (F32, F32, 16, 4, [1, 17, 3, 40], [1, 60, 3, 40], 0.5),
    (F32, F32, 16, 1, [33, 1, 1, 2, 16], [70, 7, 1, 18, 16], None),  # decode-like rows among chunks
    (F32, F32, 4, 2, [20], [20], 0.3),
    (F16, F16, 4, 4, [24, 9], [40, 9], None),
    (F16, FP8, 16, 4, [24, 9], [40, 30], 0.4),
]

PACKED = SMALL._replace(pack_gqa=True)  # a tile: 16 rows = 4 tokens x 4 heads (groups of 3 and 4), or 2 x 8
PACKED_CASES = [  # (query dtype, cache dtype, block_size, group, chunk lens, context lens, qk_clip)
    (F32, F32, 4, 4, [5, 37, 16], [9, 50, 40], None),  # cached prefixes, a chunk not a multiple of the tile
    (F32, F32, 16, 3, [1, 17, 3, 40], [1, 60, 3, 40], 0.5),  # a group padded to 4 rows (one never stored)
    (F32, F32, 16, 7, [33, 1, 2, 16], [70, 7, 18, 16], None),  # Qwen2-7B's group: 8 rows a token
    (F16, F16, 4, 4, [24, 9], [40, 9], None),
    (F16, FP8, 16, 4, [24, 9], [40, 30], 0.4),
]


@pytest.mark.parametrize(("tuning", "dtype", "cache_dtype", "block_size", "group", "q_lens", "lens", "clip"),
                         [(SMALL, *case) for case in CASES] + [(PACKED, *case) for case in PACKED_CASES]
                         + [(SMALL._replace(warp_specialize=True), *CASES[1]),
                            (PACKED._replace(warp_specialize=True), *PACKED_CASES[2])])
def test_paged_prefill_matches_reference(tuning, dtype, cache_dtype, block_size, group, q_lens, lens, clip) -> None:
    """One head a program, and (`PACKED`) every query head of a KV head in one program, padding rows unstored; the
    key loop warp-specialized computes the same (the interpreter runs its form, not its schedule)."""
    kv = make_paged_kv(lens, block_size=block_size, num_kv_heads=2, head_dim=16, cache_dtype=cache_dtype)
    query = make_query(sum(q_lens), 2 * group, 16, dtype)
    qsl = query_start_loc(q_lens)
    out = launch_paged_prefill(
        query, kv.k_cache, kv.v_cache, kv.block_tables, qsl, kv.context_lens, scale=0.25, qk_clip=clip, tuning=tuning
    )
    ref = paged_prefill_reference(
        query, kv.k_cache, kv.v_cache, kv.block_tables, qsl, kv.context_lens, scale=0.25, qk_clip=clip
    )
    assert out.dtype == dtype and out.shape == query.shape
    assert not out.isnan().any()
    assert rel_error(out, ref) < TOLERANCE[dtype]


PREFIXED_CASES = [  # (query dtype, cache dtype, block_size, group, chunk lens, context lens, qk_clip): prefixed batches
    (F32, F32, 16, 7, [20, 3, 40], [150, 200, 300], None),  # 16 tokens x 8 rows a tile; contexts over 3 key tiles
    (F32, F32, 4, 4, [37, 2], [170, 9], 0.5),  # 32 tokens x 4 rows; one chunk fresh, the batch still prefixed
    (F16, F16, 16, 4, [24, 9], [300, 40], None),
]


@pytest.mark.parametrize(("dtype", "cache_dtype", "block_size", "group", "q_lens", "lens", "clip"), PREFIXED_CASES)
def test_the_prefixed_launch_matches_reference(dtype, cache_dtype, block_size, group, q_lens, lens, clip) -> None:
    """`PREFIXED_TUNING` (128x128 tiles, packed GQA), the launch the plan picks for chunks after cached prefixes at
    least as long: through `paged_prefill` as the runtime passes it, and explicitly."""
    assert default_tuning(sum(q_lens), len(q_lens), sum(lens)) is PREFIXED_TUNING
    kv = make_paged_kv(lens, block_size=block_size, num_kv_heads=2, head_dim=16, cache_dtype=cache_dtype)
    query = make_query(sum(q_lens), 2 * group, 16, dtype)
    args = (query, kv.k_cache, kv.v_cache, kv.block_tables, query_start_loc(q_lens), kv.context_lens)
    ref = paged_prefill_reference(*args, scale=0.25, qk_clip=clip)
    out = paged_prefill(*args, scale=0.25, qk_clip=clip, tuning=PREFIXED_TUNING)
    assert not out.isnan().any()
    assert rel_error(out, ref) < TOLERANCE[dtype]
    assert torch.equal(launch_paged_prefill(*args, scale=0.25, qk_clip=clip, tuning=PREFIXED_TUNING), out)


def test_paged_prefill_unpacks_a_tuning_whose_tile_is_too_small_for_the_group() -> None:
    """Where `launch_paged_prefill` refuses (below), `paged_prefill` runs the tuning unpacked."""
    kv = make_paged_kv([40], block_size=4, num_kv_heads=1, head_dim=16, cache_dtype=F32)
    query = make_query(8, 32, 16, F32)
    args = (query, kv.k_cache, kv.v_cache, kv.block_tables, query_start_loc([8]), kv.context_lens)
    out = paged_prefill(*args, scale=0.25, tuning=PACKED)
    assert torch.equal(out, launch_paged_prefill(*args, scale=0.25, qk_clip=None, tuning=SMALL))
    assert rel_error(out, paged_prefill_reference(*args, scale=0.25)) < 1e-5


def test_packed_gqa_needs_a_tile_of_at_least_the_group() -> None:
    kv = make_paged_kv([8], block_size=4, num_kv_heads=1, head_dim=16, cache_dtype=F32)
    query = make_query(8, 32, 16, F32)
    with pytest.raises(ValueError, match="pack_gqa puts 32 query heads in a tile of block_m 16"):
        launch_paged_prefill(query, kv.k_cache, kv.v_cache, kv.block_tables, query_start_loc([8]), kv.context_lens,
                             scale=0.25, qk_clip=None, tuning=PACKED)


def test_paged_prefill_public_wrapper_with_default_tuning_and_head_dim_24() -> None:
    q_lens, lens = [150, 3, 64], [200, 3, 64]
    kv = make_paged_kv(lens, block_size=8, num_kv_heads=1, head_dim=24, cache_dtype=F32)
    query = make_query(sum(q_lens), 2, 24, F32)
    args = (query, kv.k_cache, kv.v_cache, kv.block_tables, query_start_loc(q_lens), kv.context_lens)
    assert rel_error(paged_prefill(*args, scale=0.2), paged_prefill_reference(*args, scale=0.2)) < 1e-5


TMA = SMALL._replace(page_tma=True)
TMA_CASES = [  # (tuning, block_size, group, chunk lens, context lens, qk_clip): pages of one tile or of several
    (TMA, 16, 4, [5, 37, 16], [9, 50, 40], None),
    (TMA, 64, 1, [33, 1, 2, 16], [70, 7, 18, 100], 0.5),  # four 16-key tiles a page
    (PACKED._replace(page_tma=True), 32, 7, [20, 3, 40], [150, 200, 300], None),
    (TMA._replace(warp_specialize=True), 64, 1, [33, 1, 2, 16], [70, 7, 18, 100], None),  # bench_prefill's pairing
]


@pytest.mark.parametrize(("tuning", "block_size", "group", "q_lens", "lens", "clip"), TMA_CASES)
def test_tiles_by_tma_compute_what_tiles_by_pointers_compute(tuning, block_size, group, q_lens, lens, clip) -> None:
    """Where a key tile lies in one page, K/V come by TMA descriptors: the same output as the pointer loads, bit
    for bit, with the slots past each context (a page's unwritten tail) full of NaN: they are masked, never used."""
    kv = make_paged_kv(lens, block_size=block_size, num_kv_heads=2, head_dim=16, cache_dtype=F32)
    for seq, ctx in enumerate(lens):
        page, tail = kv.block_tables[seq, (ctx - 1) // block_size], ctx % block_size
        if tail:
            kv.k_cache[page, tail:] = float("nan")
            kv.v_cache[page, tail:] = float("nan")
    query = make_query(sum(q_lens), 2 * group, 16, F32)
    args = (query, kv.k_cache, kv.v_cache, kv.block_tables, query_start_loc(q_lens), kv.context_lens)
    by_tma = launch_paged_prefill(*args, scale=0.25, qk_clip=clip, tuning=tuning)
    by_pointers = launch_paged_prefill(*args, scale=0.25, qk_clip=clip, tuning=tuning._replace(page_tma=False))
    assert not by_tma.isnan().any()
    assert torch.equal(by_tma, by_pointers)
    assert rel_error(by_tma, paged_prefill_reference(*args, scale=0.25, qk_clip=clip)) < TOLERANCE[F32]


def test_tma_is_taken_where_a_tile_lies_in_one_page() -> None:
    kv = make_paged_kv([40], block_size=16, num_kv_heads=1, head_dim=16, cache_dtype=F32)
    geometry = CacheGeometry(*kv.k_cache.shape)
    assert _page_tma(kv.k_cache, kv.v_cache, geometry, TMA)  # 16-key tiles in 16-token pages
    assert not _page_tma(kv.k_cache, kv.v_cache, geometry, SMALL)  # not asked for: the default
    assert not _page_tma(kv.k_cache, kv.v_cache, geometry, TMA._replace(block_n=32))  # a tile over two pages
    assert _page_tma(kv.k_cache[1:], kv.v_cache[1:], geometry._replace(num_blocks=geometry.num_blocks - 1),
                     TMA._replace(block_n=8))  # a slice of whole pages is still one matrix; 8-key tiles, 2 a page
    odd = make_paged_kv([40], block_size=16, num_kv_heads=1, head_dim=24, cache_dtype=F32)  # not a power of two
    assert not _page_tma(odd.k_cache, odd.v_cache, CacheGeometry(*odd.k_cache.shape), TMA)
    halves = kv.k_cache[..., :8], kv.v_cache[..., :8]  # a view that is no matrix
    assert not _page_tma(*halves, geometry._replace(head_dim=8), TMA)
