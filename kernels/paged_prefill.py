"""Prefill attention over the paged cache: flash-style, causal, variable lengths in one batch.

Sequence b contributes q_len = qsl[b+1] - qsl[b] query tokens; its cache already holds all
context_lens[b] positions, the chunk's own K/V included. Query i of the chunk sits at position
context_lens[b] - q_len + i and sees positions 0..that one, so a cached prefix (chunked prefill,
prefix-cache hit) is read like any other key:

    positions  0 ............ ctx-q_len-1 | ctx-q_len ........ ctx-1
               cached prefix (all visible)  this chunk (causal within)

Program (t, h) handles one tile of BLOCK_M query rows of one sequence. Unpacked (PACK 1), h is a query head and
the rows are BLOCK_M tokens of it. Packed (`PrefillTuning.pack_gqa`, PACK the group size rounded up to a power of
two), h is a KV head and the rows are BLOCK_M // PACK tokens x the PACK query heads that share it (row r: token
r // PACK, head h * GROUP + r % PACK; rows past the group are padding, never stored), so each K/V tile is loaded
once for the whole group instead of once per query head. Tiles are numbered without a device sync: sequence b
owns tile numbers starting at qsl[b] // TOKENS + b (TOKENS = BLOCK_M // PACK tokens a tile; enough for its
ceil(q_len / TOKENS) tiles; spare numbers exit at once), found by binary search. Key tiles before the tile's
first query position need no causal mask (stage 0); the rest do (stage 1).

The launch (`default_tuning`) follows the host's lengths: packed 128x128 tiles where the cached prefixes are, in
total, at least as long as the chunks; else 64x64 tiles, 128x128 unpacked where chunks average LONG_CHUNK tokens.
On pages of 64 tokens or more a key tile lies in one page, and K/V tiles come by TMA (`PrefillTuning.page_tma`: one
bulk copy of a [block_n, head_dim] box of the layer's pool, seen as a [pages x page tokens, heads x head_dim]
matrix), with a rule of their own. `paged_prefill` reads no length from the device, so the runtime passes the
tuning its step's `PrefillPlan` chose.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from kernels._checks import CacheGeometry, check_cache_pair, check_clip, check_index, check_query, output_for
from kernels._gather import gather_kv, masked_softmax_attend
from kernels._softmax_tile import attend_kv, attend_tile, dot_options
from kernels._triton import TensorDescriptor, interpreting, kernel_for, next_power_of_2, tl

__all__ = [
    "LONG_TUNING", "PREFIXED_TUNING", "SHORT_TUNING", "TMA_LONG_TUNING", "TMA_SHORT_TUNING", "PrefillTuning",
    "default_tuning", "for_group",
    "launch_paged_prefill", "paged_prefill", "paged_prefill_reference",
]

LOG2E = 1.4426950408889634


class PrefillTuning(NamedTuple):
    """Launch parameters."""

    block_m: int  # query rows per program
    block_n: int  # key positions per tile
    num_warps: int
    num_stages: int
    pack_gqa: bool = False  # a program's rows are the query heads of one KV head (see the module's docstring)
    # Triton's warp specialization of the key loop (`tl.range(warp_specialize=...)`): producer warps load the next
    # K/V tiles while the others compute. Not yet timed on a GPU; no default takes it (benchmarks sweep it).
    warp_specialize: bool = False
    # K/V tiles by bulk tensor copies (TMA descriptors) where a tile lies in one page (`_page_tma`; else by pointers):
    # the defaults on pages of 64 tokens and more (`default_tuning`)
    page_tma: bool = False


# Measured on an H200 (experiments/RESULTS.md): small tiles win until chunks average LONG_CHUNK tokens.
SHORT_TUNING = PrefillTuning(block_m=64, block_n=64, num_warps=4, num_stages=3)
LONG_TUNING = PrefillTuning(block_m=128, block_n=128, num_warps=8, num_stages=3)
LONG_CHUNK = 4096
# Chunks after cached prefixes at least as long as themselves: large tiles with packed GQA. Measured on an H100
# (experiments/RESULTS.md, "Where azure-code's step time goes"; bench-prefill-h100.md, Qwen2-7B's 28 / 4 heads),
# this against the old default 64x64: 0.276 vs 0.300 ms at 2,048 after 2,048, 0.441 vs 0.485 after 4,096, 0.605
# vs 0.666 after 6,144, 0.330 vs 0.343 at 2 x 1,024 after 3,072 (4-9%; unpacked 128x128 alone 0.288, 0.456, 0.624,
# 0.329). Not on fresh prompts, where packing loses: 0.428 vs 0.411 ms at 4 x 2,048, 0.202 vs 0.158 at 16 x 512.
PREFIXED_TUNING = PrefillTuning(block_m=128, block_n=128, num_warps=8, num_stages=3, pack_gqa=True)


# On pages that hold whole key tiles, K/V come by TMA. Measured on an H100 (experiments/RESULTS.md, "The prefill
# kernel's K/V by TMA"; Qwen2-7B's 28 / 4 heads, 128-token pages), against the 16-token pages' defaults: 128x128
# tiles unpacked 1.22x at 4 x 2,048, 1.18x at 1 x 8,192, 1.16x at 2,048 after 2,048; 64x64 tiles 1.16x at 16 x 512,
# where 128x128 ones lose; level at 1 x 2,048. So 128x128 from chunks averaging TMA_LONG_CHUNK tokens (between the
# measured 512 and 2,048) or after cached prefixes, 64x64 below; on 64-token pages 64x64 always.
TMA_SHORT_TUNING = SHORT_TUNING._replace(page_tma=True)
TMA_LONG_TUNING = LONG_TUNING._replace(page_tma=True)
TMA_LONG_CHUNK = 1024


def default_tuning(num_tokens: int, num_seqs: int, num_keys: int, page_tokens: int = 0) -> PrefillTuning:
    """The launch for `num_tokens` query rows in `num_seqs` chunks whose context lengths (each chunk's own
    tokens included) sum to `num_keys`, on a cache of `page_tokens`-token pages; 0 keys (not known) gives the rule
    of fresh prompts, 0 page tokens (not known) the rule of pages too small for TMA."""
    prefixed = num_tokens > 0 and num_keys >= 2 * num_tokens  # the cached prefixes, in total, as long as the chunks
    if page_tokens >= TMA_LONG_TUNING.block_n:
        long = prefixed or num_tokens >= TMA_LONG_CHUNK * max(1, num_seqs)
        return TMA_LONG_TUNING if long else TMA_SHORT_TUNING
    if page_tokens >= TMA_SHORT_TUNING.block_n:
        return TMA_SHORT_TUNING
    if prefixed:
        return PREFIXED_TUNING
    return LONG_TUNING if num_tokens >= LONG_CHUNK * max(1, num_seqs) else SHORT_TUNING


def for_group(tuning: PrefillTuning, group: int) -> PrefillTuning:
    """`tuning`, unpacked where its tile cannot hold a token's packed query heads (see `launch_paged_prefill`);
    PREFIXED_TUNING then becomes LONG_TUNING."""
    return tuning if _pack(tuning, group) <= tuning.block_m else tuning._replace(pack_gqa=False)


def _pack(tuning: PrefillTuning, group: int) -> int:
    """A tile's rows a token: its GQA group rounded up to a power of two when packed, else 1 (one head a program)."""
    return next_power_of_2(group) if tuning.pack_gqa else 1


def _prefill_kernel(
    q_ptr, k_ptr, v_ptr, k_desc, v_desc, out_ptr, bt_ptr, qsl_ptr, ctx_ptr,
    scale_log2, clip_log2, num_seqs,
    stride_qt, stride_qh, stride_ot, stride_oh,
    stride_kb, stride_ko, stride_kh, stride_vb, stride_vo, stride_vh, stride_bt,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, USE_CLIP: tl.constexpr, DOT_PRECISION: tl.constexpr,
    COMPUTE_F16: tl.constexpr, PACK: tl.constexpr, WARP_SPECIALIZE: tl.constexpr, PAGE_TMA: tl.constexpr,
):  # fmt: skip
    TOKENS: tl.constexpr = BLOCK_M // PACK  # query tokens a tile holds
    # why reversed: the last tiles of a sequence see the most keys; starting them first evens the tail
    tile = tl.num_programs(0) - 1 - tl.program_id(0)
    lo = tl.zeros([], tl.int32)
    hi = lo + num_seqs - 1
    while lo < hi:  # largest b with qsl[b] // TOKENS + b <= tile
        mid = (lo + hi + 1) // 2
        goes_right = tl.load(qsl_ptr + mid) // TOKENS + mid <= tile
        lo = tl.where(goes_right, mid, lo)
        hi = tl.where(goes_right, hi, mid - 1)
    seq = lo
    q_start = tl.load(qsl_ptr + seq)
    q_len = tl.load(qsl_ptr + seq + 1) - q_start
    m0 = (tile - q_start // TOKENS - seq) * TOKENS  # the tile's first token in the chunk
    if m0 >= q_len:
        return
    first_pos = tl.load(ctx_ptr + seq) - q_len  # position of the chunk's first query

    offs_r = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    d_mask = offs_d < HEAD_DIM
    if PACK == 1:
        kv_head = tl.program_id(1) // GROUP
        offs_m = m0 + offs_r  # the rows' tokens
        heads = tl.program_id(1) + 0 * offs_r
        row_mask = offs_m < q_len
    else:
        kv_head = tl.program_id(1)
        offs_m = m0 + offs_r // PACK
        heads = kv_head * GROUP + offs_r % PACK
        row_mask = (offs_m < q_len) & (offs_r % PACK < GROUP)
    md_mask = row_mask[:, None] & d_mask[None, :]
    rows = q_start + offs_m
    q_rows = q_ptr + rows[:, None] * stride_qt + heads[:, None] * stride_qh
    q = tl.load(q_rows + offs_d[None, :], mask=md_mask, other=0.0)
    if COMPUTE_F16:  # why: an fp8 cache converts to fp16 in one step, to bf16 only through fp32
        q = q.to(tl.float16)
    q_pos = first_pos + offs_m  # [BLOCK_M]

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    table = bt_ptr + seq * stride_bt
    unmasked_end = (first_pos + m0 + 1) // BLOCK_N * BLOCK_N  # every row sees keys below this
    end = first_pos + tl.minimum(m0 + TOKENS, q_len)  # one past the last row's position
    for stage in tl.static_range(2):
        if stage == 0:
            n_lo = 0
            n_hi = unmasked_end
        else:
            n_lo = unmasked_end
            n_hi = end
        for n0 in tl.range(n_lo, n_hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
            pos = n0 + offs_n  # [BLOCK_N]
            causal = pos[None, :] <= q_pos[:, None]  # applied in stage 1 only
            if PAGE_TMA:  # the tile lies in one page: one bulk copy each of K and V (see `_page_tma`)
                row = tl.load(table + n0 // BLOCK_SIZE) * BLOCK_SIZE + n0 % BLOCK_SIZE
                k = k_desc.load([row, kv_head * HEAD_DIM])
                v = v_desc.load([row, kv_head * HEAD_DIM])
                if stage == 1:  # why: slots past the context hold another sequence's (finite) values; p is 0 there
                    v = tl.where((pos < end)[:, None], v, 0.0)
                m_i, l_i, acc = attend_kv(
                    q, k, v, causal, m_i, l_i, acc, scale_log2, clip_log2, USE_CLIP, stage == 1, DOT_PRECISION,
                )  # fmt: skip
            else:
                if stage == 0:
                    block = tl.load(table + pos // BLOCK_SIZE).to(tl.int64)
                    nd_mask = d_mask[None, :]
                else:
                    block = tl.load(table + pos // BLOCK_SIZE, mask=pos < end, other=0).to(tl.int64)
                    nd_mask = (pos < end)[:, None] & d_mask[None, :]
                within = pos % BLOCK_SIZE
                k_rows = block * stride_kb + within * stride_ko + kv_head * stride_kh
                v_rows = block * stride_vb + within * stride_vo + kv_head * stride_vh
                m_i, l_i, acc = attend_tile(
                    q, k_ptr + k_rows[:, None] + offs_d[None, :], v_ptr + v_rows[:, None] + offs_d[None, :],
                    nd_mask, causal, m_i, l_i, acc, scale_log2, clip_log2, USE_CLIP, stage == 1, DOT_PRECISION,
                )  # fmt: skip

    out = acc / l_i[:, None]  # every row sees position 0, so l_i > 0
    tl.store(
        out_ptr + rows[:, None] * stride_ot + heads[:, None] * stride_oh + offs_d[None, :],
        out.to(out_ptr.dtype.element_ty),
        mask=md_mask,
    )


_prefill_kernel.do_not_specialize = ("num_seqs", "stride_bt")  # both change from step to step


def _check_prefill_args(query, k_cache, v_cache, block_tables, query_start_loc, context_lens, scale, qk_clip):
    geometry = check_cache_pair("paged_prefill", k_cache, v_cache)
    check_query("paged_prefill", query, geometry, k_cache.device)
    if block_tables.dim() != 2:
        raise ValueError(f"paged_prefill: block_tables must be [B, max_blocks], got {tuple(block_tables.shape)}")
    batch = block_tables.shape[0]
    device = k_cache.device
    check_index("paged_prefill", "block_tables", block_tables, tuple(block_tables.shape), torch.int32, device)
    check_index("paged_prefill", "query_start_loc", query_start_loc, (batch + 1,), torch.int32, device)
    check_index("paged_prefill", "context_lens", context_lens, (batch,), torch.int32, device)
    check_clip("paged_prefill", scale, qk_clip)
    return geometry


def launch_paged_prefill(
    query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    query_start_loc: torch.Tensor, context_lens: torch.Tensor, *, scale: float, qk_clip: float | None,
    tuning: PrefillTuning, out: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """`paged_prefill` with explicit launch parameters (benchmarks sweep them); a packed tile too small for the
    group is an error here."""
    geometry = _check_prefill_args(query, k_cache, v_cache, block_tables, query_start_loc, context_lens, scale, qk_clip)
    pack = _pack(tuning, query.shape[1] // geometry.num_kv_heads)
    if pack > tuning.block_m:
        raise ValueError(f"paged_prefill: pack_gqa puts {pack} query heads in a tile of block_m {tuning.block_m}")
    return _launch(query, k_cache, v_cache, block_tables, query_start_loc, context_lens, geometry, scale, qk_clip,
                   tuning, out)


def _launch(
    query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    query_start_loc: torch.Tensor, context_lens: torch.Tensor, geometry: CacheGeometry, scale: float,
    qk_clip: float | None, tuning: PrefillTuning, out: torch.Tensor | None,
) -> torch.Tensor:  # fmt: skip
    """The launch, on checked arguments and a tuning whose tile holds the packed group."""
    num_tokens, num_heads, head_dim = query.shape
    batch = block_tables.shape[0]
    out = output_for("paged_prefill", query, out)
    if num_tokens == 0 or batch == 0:
        return out
    group = num_heads // geometry.num_kv_heads
    pack = _pack(tuning, group)
    block_d = max(16, next_power_of_2(head_dim))
    descs = _page_descriptors(k_cache, v_cache, geometry, tuning.block_n) if _page_tma(
        k_cache, v_cache, geometry, tuning) else (None, None)
    kernel = kernel_for(_prefill_kernel, query.device)
    kernel[(num_tokens // (tuning.block_m // pack) + batch, geometry.num_kv_heads if pack > 1 else num_heads)](
        query, k_cache, v_cache, *descs, out, block_tables, query_start_loc, context_lens,
        scale * LOG2E, (qk_clip or 0.0) * LOG2E, batch,
        query.stride(0), query.stride(1), out.stride(0), out.stride(1),
        *k_cache.stride()[:3], *v_cache.stride()[:3], block_tables.stride(0),
        GROUP=group, HEAD_DIM=head_dim, BLOCK_D=block_d,
        BLOCK_SIZE=geometry.block_size, BLOCK_M=tuning.block_m, BLOCK_N=tuning.block_n,
        USE_CLIP=qk_clip is not None, **dot_options(query, k_cache), PACK=pack,
        WARP_SPECIALIZE=tuning.warp_specialize, PAGE_TMA=descs[0] is not None,
        num_warps=tuning.num_warps, num_stages=tuning.num_stages,
    )  # fmt: skip
    return out


def _page_tma(k_cache: torch.Tensor, v_cache: torch.Tensor, geometry: CacheGeometry, tuning: PrefillTuning) -> bool:
    """Whether the launch loads K/V tiles by TMA: asked for, a tile within one page (pages a multiple of
    `block_n` tokens; every tile starts at a multiple of block_n), a power-of-two head size, a 16- or 32-bit cache
    (fp8 not yet run on a GPU), contiguous caches (a layer's pool is then a [pages x page tokens, heads x head_dim]
    matrix), on Hopper or later (or the interpreter)."""
    if not tuning.page_tma or geometry.block_size % tuning.block_n or TensorDescriptor is None:
        return False
    if next_power_of_2(geometry.head_dim) != geometry.head_dim or geometry.head_dim < 16:
        return False
    if k_cache.dtype == torch.float8_e4m3fn:  # why: not yet run on a GPU (bf16 was, on an H100)
        return False
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        return False
    if k_cache.device.type == "cuda":
        return torch.cuda.get_device_capability(k_cache.device) >= (9, 0)
    return interpreting()


def _page_descriptors(k_cache: torch.Tensor, v_cache: torch.Tensor, geometry: CacheGeometry, block_n: int) -> tuple:
    """TMA descriptors of both pools as [pages x page tokens, heads x head_dim] matrices, a tile being block_n
    rows (positions) x head_dim columns (one head)."""
    rows, cols = geometry.num_blocks * geometry.block_size, geometry.num_kv_heads * geometry.head_dim
    return tuple(TensorDescriptor(cache.view(rows, cols), [rows, cols], [cols, 1], [block_n, geometry.head_dim])
                 for cache in (k_cache, v_cache))


def paged_prefill(
    query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    query_start_loc: torch.Tensor, context_lens: torch.Tensor, *, scale: float, qk_clip: float | None = None,
    out: torch.Tensor | None = None, tuning: PrefillTuning | None = None,
) -> torch.Tensor:  # fmt: skip
    """Causal prefill attention over the paged cache (Triton).

    query [T, Hq, D] (the chunks of B sequences, concatenated); block_tables [B, max_blocks] int32;
    query_start_loc [B+1] int32 (chunk b is rows qsl[b]:qsl[b+1]); context_lens [B] int32 (total
    positions of b including its chunk, whose K/V are already in the cache). Returns [T, Hq, D]: `out` when
    given (written in place), else a new tensor. `tuning`: the launch, from the host's lengths (`PrefillPlan`);
    without one, `default_tuning` without the keys, which only the device holds here. Packing that the group
    does not fit falls back to the unpacked launch (`for_group`).
    Never synchronizes with the device.
    """
    geometry = _check_prefill_args(query, k_cache, v_cache, block_tables, query_start_loc, context_lens, scale, qk_clip)
    if tuning is None:
        tuning = default_tuning(query.shape[0], block_tables.shape[0], 0, geometry.block_size)
    tuning = for_group(tuning, query.shape[1] // geometry.num_kv_heads)
    return _launch(query, k_cache, v_cache, block_tables, query_start_loc, context_lens, geometry, scale, qk_clip,
                   tuning, out)


def paged_prefill_reference(
    query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    query_start_loc: torch.Tensor, context_lens: torch.Tensor, *, scale: float, qk_clip: float | None = None,
) -> torch.Tensor:  # fmt: skip
    """Torch version of `paged_prefill`: per sequence, gather K/V and run the masked softmax in fp32."""
    geometry = _check_prefill_args(query, k_cache, v_cache, block_tables, query_start_loc, context_lens, scale, qk_clip)
    out = torch.empty_like(query)
    starts, lens = query_start_loc.tolist(), context_lens.tolist()
    for seq, ctx in enumerate(lens):
        q_start, q_end = starts[seq], starts[seq + 1]
        q_len = q_end - q_start
        if q_len == 0:
            continue
        k = gather_kv(k_cache, block_tables[seq], ctx).transpose(0, 1)  # [Hkv, ctx, D]
        v = gather_kv(v_cache, block_tables[seq], ctx).transpose(0, 1)
        q = query[q_start:q_end].view(q_len, geometry.num_kv_heads, -1, geometry.head_dim).permute(1, 2, 0, 3)
        q_pos = torch.arange(ctx - q_len, ctx, device=query.device)
        visible = torch.arange(ctx, device=query.device)[None, :] <= q_pos[:, None]  # [q_len, ctx]
        o = masked_softmax_attend(q, k, v, visible, scale, qk_clip)  # [Hkv, G, q_len, D]
        out[q_start:q_end] = o.permute(2, 0, 1, 3).reshape(q_len, -1, geometry.head_dim).to(query.dtype)
    return out
