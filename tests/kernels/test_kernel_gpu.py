"""Triton kernels against their references on a CUDA device, at serving-sized shapes, in bf16."""

from __future__ import annotations

import pytest
import torch
from kernel_factories import make_paged_kv, make_query, query_start_loc, rel_error

from kernels import paged_decode, paged_decode_reference, paged_prefill, paged_prefill_reference, prefill_attention
from kernels.kv_write import write_kv, write_kv_reference
from kernels.paged_decode import DecodeTuning, launch_paged_decode
from kernels.paged_prefill import LONG_TUNING, PREFIXED_TUNING, SHORT_TUNING, PrefillTuning, launch_paged_prefill
from kernels.skinny_gemm import CANDIDATES, SkinnyTuning, skinny_linear

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
BF16, FP8 = torch.bfloat16, torch.float8_e4m3fn


def _lens(count: int, low: int, high: int, seed: int) -> list[int]:
    return torch.randint(low, high, (count,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.parametrize("block_size", [1, 8, 16, 32])
@pytest.mark.parametrize("group", [1, 4])
@pytest.mark.parametrize(("split_min", "clip"), [(2048, None), (256, None), (10**6, 5.0), (512, 5.0)])
def test_paged_decode_bf16(block_size: int, group: int, split_min: int, clip: float | None) -> None:
    lens = [1, 2049, *_lens(10, 2, 4000, seed=block_size + group)]
    kv = make_paged_kv(lens, block_size=block_size, num_kv_heads=8, head_dim=128, cache_dtype=BF16, device="cuda")
    query = make_query(len(lens), 8 * group, 128, BF16, device="cuda")
    out = paged_decode(query, *kv, scale=128**-0.5, qk_clip=clip, split_kv_min_len=split_min)
    ref = paged_decode_reference(query, *kv, scale=128**-0.5, qk_clip=clip)
    assert not out.isnan().any()
    assert rel_error(out, ref) <= 1e-2


def test_paged_decode_with_many_partitions() -> None:
    lens = [1, 300, 5000, 2500, 64]
    kv = make_paged_kv(lens, block_size=16, num_kv_heads=8, head_dim=128, cache_dtype=BF16, device="cuda")
    query = make_query(len(lens), 32, 128, BF16, device="cuda")
    tuning = DecodeTuning(block_n=32, programs_per_sm=64, min_partition=32)
    out = launch_paged_decode(query, *kv, scale=0.1, qk_clip=None, split_kv_min_len=100, tuning=tuning)
    assert not out.isnan().any()
    assert rel_error(out, paged_decode_reference(query, *kv, scale=0.1)) <= 1e-2


@pytest.mark.parametrize(("lens", "block_size"), [([1024] * 256, 8), ([7000, 3000, 5, 8000], 16)])
def test_paged_decode_replays_under_cuda_graph(lens: list[int], block_size: int) -> None:
    # The runtime captures decode steps: the launch must capture, and replays must read live inputs.
    kv = make_paged_kv(lens, block_size=block_size, num_kv_heads=8, head_dim=128, cache_dtype=BF16, device="cuda")
    query = make_query(len(lens), 32, 128, BF16, device="cuda")
    run = lambda: paged_decode(query, *kv, scale=128**-0.5, split_kv_min_len=2048)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run()  # compile outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = run()
    for seed in (7, 8):
        query.copy_(make_query(len(lens), 32, 128, BF16, device="cuda", seed=seed))
        for _ in range(20):
            graph.replay()
        torch.cuda.synchronize()
        assert not out.isnan().any()
        assert rel_error(out, paged_decode_reference(query, *kv, scale=128**-0.5)) <= 1e-2


@pytest.mark.parametrize("split_min", [2048, 64])
def test_paged_decode_fp8_cache(split_min: int) -> None:
    lens = _lens(16, 1, 3000, seed=5)
    kv = make_paged_kv(lens, block_size=16, num_kv_heads=8, head_dim=128, cache_dtype=FP8, device="cuda")
    query = make_query(len(lens), 32, 128, BF16, device="cuda")
    out = paged_decode(query, *kv, scale=128**-0.5, split_kv_min_len=split_min)
    assert not out.isnan().any()
    assert rel_error(out, paged_decode_reference(query, *kv, scale=128**-0.5)) <= 1e-2


@pytest.mark.parametrize("block_size", [1, 16, 32])
@pytest.mark.parametrize("group", [1, 4])
@pytest.mark.parametrize("clip", [None, 5.0])
@pytest.mark.parametrize("cache_dtype", [BF16, FP8])
def test_paged_prefill_bf16(block_size: int, group: int, clip: float | None, cache_dtype: torch.dtype) -> None:
    q_lens = [1, 37, 300, 1024, 129]
    lens = [1, 100, 1000, 1024, 700]  # cached prefixes before most chunks
    kv = make_paged_kv(
        lens, block_size=block_size, num_kv_heads=8, head_dim=128, cache_dtype=cache_dtype, device="cuda"
    )
    query = make_query(sum(q_lens), 8 * group, 128, BF16, device="cuda")
    args = (query, kv.k_cache, kv.v_cache, kv.block_tables, query_start_loc(q_lens, "cuda"), kv.context_lens)
    out = paged_prefill(*args, scale=128**-0.5, qk_clip=clip)
    assert not out.isnan().any()
    assert rel_error(out, paged_prefill_reference(*args, scale=128**-0.5, qk_clip=clip)) <= 1e-2


@pytest.mark.parametrize("block_size", [16, 128])
@pytest.mark.parametrize("group", [1, 7])
def test_fa4_prefill_bf16(block_size: int, group: int) -> None:
    """FlashAttention 4 (`kernel.prefill_kernel: fa4`) where it is installed and this GPU runs it."""
    from kernels.fa4_prefill import fa4_paged_prefill, unavailable

    why = unavailable(torch.device("cuda"), BF16, None)
    if why:
        pytest.skip(f"FA4 {why}")
    q_lens, lens = [1, 37, 300, 1024, 129], [1, 100, 1000, 1024, 700]
    kv = make_paged_kv(lens, block_size=block_size, num_kv_heads=4, head_dim=128, cache_dtype=BF16, device="cuda")
    query = make_query(sum(q_lens), 4 * group, 128, BF16, device="cuda")
    args = (query, kv.k_cache, kv.v_cache, kv.block_tables, query_start_loc(q_lens, "cuda"), kv.context_lens)
    out = fa4_paged_prefill(*args, scale=128**-0.5, max_q=max(q_lens), max_k=max(lens))
    assert not out.isnan().any()
    assert rel_error(out, paged_prefill_reference(*args, scale=128**-0.5)) <= 1e-2


@pytest.mark.parametrize("block_size", [64, 128])
@pytest.mark.parametrize("tuning", [SHORT_TUNING, LONG_TUNING, PREFIXED_TUNING])
@pytest.mark.parametrize("cache_dtype", [BF16, FP8])
def test_prefill_by_tma_equals_prefill_by_pointers(block_size: int, tuning: PrefillTuning,
                                                   cache_dtype: torch.dtype) -> None:
    """Pages that hold whole key tiles: K/V by TMA give the pointer loads' output (a page's unwritten tail NaN)."""
    q_lens, lens = [1, 37, 300, 2048, 129], [1, 100, 1000, 6000, 700]
    kv = make_paged_kv(lens, block_size=block_size, num_kv_heads=4, head_dim=128, cache_dtype=cache_dtype,
                       device="cuda")
    for seq, ctx in enumerate(lens):
        if ctx % block_size:
            kv.v_cache[kv.block_tables[seq, (ctx - 1) // block_size], ctx % block_size:] = float("nan")
    query = make_query(sum(q_lens), 4 * 7, 128, BF16, device="cuda")
    args = (query, kv.k_cache, kv.v_cache, kv.block_tables, query_start_loc(q_lens, "cuda"), kv.context_lens)
    out = launch_paged_prefill(*args, scale=128**-0.5, qk_clip=None, tuning=tuning._replace(page_tma=True))
    assert not out.isnan().any()
    assert torch.allclose(out, launch_paged_prefill(*args, scale=128**-0.5, qk_clip=None,
                                                    tuning=tuning._replace(page_tma=False)), atol=0, rtol=0)
    assert rel_error(out, paged_prefill_reference(*args, scale=128**-0.5)) <= 1e-2


@pytest.mark.parametrize("group", [4, 7])
@pytest.mark.parametrize("tuning", [PrefillTuning(64, 64, 4, 3, True), PrefillTuning(128, 64, 8, 3, True),
                                    PREFIXED_TUNING])
def test_packed_gqa_prefill_bf16(group: int, tuning: PrefillTuning) -> None:
    """The query heads of a KV head in one program (Llama-3-8B's group of 4, Qwen2-7B's of 7, padded to 8)."""
    q_lens, lens = [1, 37, 300, 2048, 129], [1, 100, 1000, 6000, 700]
    kv = make_paged_kv(lens, block_size=16, num_kv_heads=4, head_dim=128, cache_dtype=BF16, device="cuda")
    query = make_query(sum(q_lens), 4 * group, 128, BF16, device="cuda")
    args = (query, kv.k_cache, kv.v_cache, kv.block_tables, query_start_loc(q_lens, "cuda"), kv.context_lens)
    out = launch_paged_prefill(*args, scale=128**-0.5, qk_clip=None, tuning=tuning)
    assert not out.isnan().any()
    assert rel_error(out, paged_prefill_reference(*args, scale=128**-0.5)) <= 1e-2


@pytest.mark.parametrize("head_dim", [64, 96])
def test_paged_prefill_other_head_dims_through_dispatch(head_dim: int) -> None:
    q_lens, lens = [5, 200, 64, 1], [50, 200, 64, 300]
    kv = make_paged_kv(lens, block_size=16, num_kv_heads=2, head_dim=head_dim, cache_dtype=BF16, device="cuda")
    query = make_query(sum(q_lens), 8, head_dim, BF16, device="cuda")
    args = (query, kv.k_cache, kv.v_cache, kv.block_tables, query_start_loc(q_lens, "cuda"), kv.context_lens)
    out = prefill_attention(*args, scale=0.1, qk_clip=None, flash_min_len=64, use_triton=True)
    assert not out.isnan().any()
    assert rel_error(out, paged_prefill_reference(*args, scale=0.1)) <= 1e-2


@pytest.mark.parametrize("cache_dtype", [BF16, FP8])
def test_write_kv_equals_reference_bit_for_bit(cache_dtype: torch.dtype) -> None:
    kv = make_paged_kv([600, 300], block_size=16, num_kv_heads=8, head_dim=128, cache_dtype=cache_dtype, device="cuda")
    key = make_query(500, 8, 128, BF16, device="cuda", seed=3) * 100  # large values: fp8 saturation too
    value = make_query(500, 8, 128, BF16, device="cuda", seed=4)
    num_slots = kv.k_cache.shape[0] * kv.k_cache.shape[1]
    slots = torch.randperm(num_slots, generator=torch.Generator().manual_seed(5))[:500].cuda()
    expected = [kv.k_cache.clone(), kv.v_cache.clone()]
    write_kv_reference(key, value, *expected, slots)
    write_kv(key, value, kv.k_cache, kv.v_cache, slots)
    assert torch.equal(kv.k_cache.view(torch.uint8), expected[0].view(torch.uint8))
    assert torch.equal(kv.v_cache.view(torch.uint8), expected[1].view(torch.uint8))


def test_rms_norm_with_residual_bf16() -> None:
    from kernels.norm import rms_norm, rms_norm_reference

    x = make_query(4000, 32, 128, BF16, device="cuda", seed=8).view(4000, 4096)
    residual = make_query(4000, 32, 128, BF16, device="cuda", seed=9).view(4000, 4096) * 3
    weight = make_query(1, 32, 128, BF16, device="cuda", seed=10).view(4096)
    out, res = rms_norm(x, weight, 1e-5, residual)
    ref_out, ref_res = rms_norm_reference(x, weight, 1e-5, residual)
    assert torch.equal(res, ref_res)
    assert not out.isnan().any() and rel_error(out, ref_out) <= 1e-2
    assert (out == ref_out).float().mean() >= 0.99  # the rest: one bf16 unit apart (fp32 sum order)
    alone, same = rms_norm(x, weight, 1e-5)
    assert same is x and rel_error(alone, rms_norm_reference(x, weight, 1e-5).normed) <= 1e-2


def test_rotary_bf16_on_fused_projection_views() -> None:
    from kernels.rotary import apply_rotary, apply_rotary_reference

    qkv = make_query(3000, 48, 128, BF16, device="cuda", seed=11).view(3000, 48 * 128)
    q, k = qkv[:, :4096].view(3000, 32, 128), qkv[:, 4096:5120].view(3000, 8, 128)
    angles = torch.rand(3000, 64, generator=torch.Generator().manual_seed(12)).cuda() * 1000
    cos, sin = torch.cat((angles, angles), -1).cos().to(BF16), torch.cat((angles, angles), -1).sin().to(BF16)
    ref_q, ref_k = apply_rotary_reference(q, cos, sin), apply_rotary_reference(k, cos, sin)
    apply_rotary(q, cos, sin)
    apply_rotary(k, cos, sin)
    assert rel_error(q, ref_q) <= 1e-2 and rel_error(k, ref_k) <= 1e-2
    assert not q.isnan().any() and not k.isnan().any()


def test_rotary_bf16_tables_at_positions_q_and_k_in_one_launch() -> None:
    from kernels.rotary import apply_rotary, apply_rotary_reference

    qkv = make_query(3000, 48, 128, BF16, device="cuda", seed=13).view(3000, 48 * 128)
    qk = qkv[:, :5120].view(3000, 40, 128)  # q (32 heads) | k (8), one view
    angles = torch.rand(8192, 64, generator=torch.Generator().manual_seed(14)).cuda() * 1000
    cos, sin = torch.cat((angles, angles), -1).cos().to(BF16), torch.cat((angles, angles), -1).sin().to(BF16)
    positions = torch.randint(0, 8192, (3000,), generator=torch.Generator().manual_seed(15)).cuda()
    ref = apply_rotary_reference(qk, cos, sin, positions)
    v_before = qkv[:, 5120:].clone()
    assert apply_rotary(qk, cos, sin, positions) is qk
    assert rel_error(qk, ref) <= 1e-2 and not qk.isnan().any()
    assert torch.equal(qkv[:, 5120:], v_before)


def test_silu_and_mul_bf16() -> None:
    from kernels.activation import silu_and_mul, silu_and_mul_reference

    x = make_query(2000, 224, 128, BF16, device="cuda", seed=12).view(2000, 2 * 14336) * 3
    out, ref = silu_and_mul(x), silu_and_mul_reference(x)
    assert not out.isnan().any() and rel_error(out, ref) <= 1e-2
    assert (out == ref).float().mean() >= 0.99


@pytest.mark.parametrize("tuning", CANDIDATES)
@pytest.mark.parametrize(("rows", "n", "k", "bias"), [(1, 4608, 3584, True), (5, 3584, 18944, False),
                                                      (16, 1000, 576, False)])
def test_skinny_linear_bf16_every_candidate(tuning: SkinnyTuning, rows: int, n: int, k: int, bias: bool) -> None:
    gen = torch.Generator(device="cuda").manual_seed(rows)
    x = torch.randn(rows, k, device="cuda", dtype=BF16, generator=gen)
    w = torch.randn(n, k, device="cuda", dtype=BF16, generator=gen) * k**-0.5
    b = torch.randn(n, device="cuda", dtype=BF16, generator=gen) if bias else None
    out = skinny_linear(x, w, b, tuning=tuning)
    ref = torch.nn.functional.linear(x.float(), w.float(), None if b is None else b.float())
    assert rel_error(out, ref) <= 1e-2
    alone = skinny_linear(x[-1:], w, b, tuning=tuning)  # a row's value does not depend on the others
    assert torch.equal(alone[0], out[-1])


@pytest.mark.parametrize("tuning", [CANDIDATES[0], next(t for t in CANDIDATES if t.split_k > 1)])
def test_skinny_linear_replays_under_cuda_graph(tuning: SkinnyTuning) -> None:
    """Split-K included: its partials buffer is allocated inside the capture, from the graph's own pool."""
    x = torch.randn(2, 512, device="cuda", dtype=BF16)
    w = torch.randn(768, 512, device="cuda", dtype=BF16)
    out = torch.empty(2, 768, device="cuda", dtype=BF16)
    skinny_linear(x, w, tuning=tuning, out=out)  # compiled outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        skinny_linear(x, w, tuning=tuning, out=out)
    x.copy_(torch.randn_like(x))
    graph.replay()
    assert torch.equal(out, skinny_linear(x, w, tuning=tuning))
