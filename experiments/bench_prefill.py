"""Paged prefill (flash) attention vs torch SDPA's flash backend on contiguous inputs.

    python -m experiments.bench_prefill [--sweep | --warp-specialized | --tma] [--heads 28 4] [--block-size 16]
                                        [--record]

Causal prompts, 32 query / 8 kv heads (`--heads`: Qwen2-7B's 28 / 4), head_dim 128, bf16; the paged
kernel reads K/V from a block-size-16 cache whose tables are a random permutation of the pool. Fresh
prompts first, then 2,048-token chunks after a cached prefix (chunked prefill of a long prompt: the
paged kernel alone, SDPA has no such causal alignment). `--sweep` includes packed GQA launches
(`pack_gqa`: a KV head's query heads in one program). `--warp-specialized`: only the warp-specialized launches
beside their twins (the same launch without it) and the default, on a fresh 2,048-token prompt and the chunks
after a prefix, each checked against the torch reference first (a short device call: about seven compilations).
`--tma`: the launches that can load K/V tiles by TMA (`PrefillTuning.page_tma`, where a tile lies in one page),
each beside its twin loading by pointers, checked; with `--block-size` 64 or 128 (pages of that many tokens; the
default 16 holds no 64-key tile, so nothing takes TMA there). Both flags: the warp-specialized pairs loading by TMA
(`--warp-specialized --tma --block-size 128`).
Reports tokens/s and TFLOP/s (causal: 2 matmuls x 2 FLOP x L(L+1)/2 x D per head) of each and the
ratio SDPA time / paged time (>= 1.0 means the paged kernel is as fast). The first row per shape is
the launch the runtime picks (`default_tuning` of the step's `PrefillPlan`); `--sweep` adds variants.
Times are CUDA-graph replays (device time, without Python launch overhead, which would dominate the
512-token case).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from experiments.paged import paged_inputs
from experiments.record import add_record_args, header, record
from experiments.timing import time_ms
from kernels.paged_prefill import (
    LONG_TUNING,
    PREFIXED_TUNING,
    SHORT_TUNING,
    PrefillTuning,
    default_tuning,
    launch_paged_prefill,
    paged_prefill_reference,
)

Q_HEADS, KV_HEADS, HEAD_DIM, BLOCK_SIZE = 32, 8, 128, 16
SHAPES = [(1, 512), (1, 1024), (1, 2048), (1, 4096), (1, 8192), (16, 512), (4, 2048)]  # (sequences, length)
PREFIXED = [(1, 2048, 2048), (1, 2048, 4096), (1, 2048, 6144), (2, 1024, 3072)]  # (sequences, chunk, cached prefix)
SWEEP = [PrefillTuning(*launch) for launch in [
    (64, 64, 4, 3, False), (128, 128, 8, 3, False), (128, 64, 8, 3, False), (64, 64, 4, 4, False),
    (64, 32, 4, 3, False), (128, 128, 8, 2, False), (64, 64, 8, 3, False), (128, 64, 4, 4, False),
    (64, 64, 4, 3, True), (128, 64, 8, 3, True), (128, 128, 8, 3, True), (64, 128, 4, 3, True),
    (128, 128, 8, 3, True, True), (128, 128, 8, 3, False, True), (128, 64, 8, 3, True, True),  # warp-specialized
]]  # fmt: skip


WS_PAIRS = [launch for t in SWEEP if t.warp_specialize for launch in (t._replace(warp_specialize=False), t)]


def ws_pairs(tma: bool) -> list[PrefillTuning]:
    """The launches of `--warp-specialized`, each after its twin without it; with `--tma`, both load K/V by TMA
    (FlashAttention 3's pairing: bulk copies feeding warp-specialized consumers)."""
    return [launch._replace(page_tma=tma) for launch in WS_PAIRS]


def tma_pairs() -> list[PrefillTuning]:
    """The launches of `--tma`, each after its twin without TMA."""
    bases = [SHORT_TUNING, LONG_TUNING, PREFIXED_TUNING, PrefillTuning(128, 64, 8, 3, False),
             PrefillTuning(128, 64, 8, 3, True)]
    return [launch for t in bases for launch in (t._replace(page_tma=False), t._replace(page_tma=True))]


def chunk_inputs(seqs: int, length: int, prefix: int = 0, heads: tuple[int, int] = (Q_HEADS, KV_HEADS),
                 block_size: int = BLOCK_SIZE):
    """`seqs` chunks of `length` tokens, each after `prefix` cached positions, on pages of `block_size` tokens."""
    k_cache, v_cache, tables, lens = paged_inputs(seqs, prefix + length, block_size, kv_heads=heads[1],
                                                  head_dim=HEAD_DIM)
    qsl = torch.arange(0, seqs * length + 1, length, device="cuda", dtype=torch.int32)
    query = torch.randn(seqs * length, heads[0], HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    return query, k_cache, v_cache, tables, qsl, lens


def causal_flops(seqs: int, length: int, prefix: int, q_heads: int) -> float:
    """The FLOPs of `seqs` causal chunks of `length` after `prefix` cached positions: 2 matmuls x 2 FLOP x D per
    visible (query, key) pair and head."""
    return seqs * q_heads * 4 * HEAD_DIM * length * (prefix + (length + 1) / 2)


def time_sdpa(seqs: int, length: int, heads: tuple[int, int]) -> float:
    q = torch.randn(seqs, heads[0], length, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(seqs, heads[1], length, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        try:
            return time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True), graph=True)
        except RuntimeError:  # why: a flash build without GQA support; expanded K/V cost it the same FLOPs
            k, v = (t.repeat_interleave(heads[0] // heads[1], dim=1) for t in (k, v))
            return time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), graph=True)


def max_error(inputs, tuning: PrefillTuning) -> float:
    """The launch's largest absolute difference from the torch reference on these inputs."""
    got = launch_paged_prefill(*inputs, scale=HEAD_DIM**-0.5, qk_clip=None, tuning=tuning)
    want = paged_prefill_reference(*inputs, scale=HEAD_DIM**-0.5)
    return (got.float() - want.float()).abs().max().item()


def shape_rows(seqs: int, length: int, prefix: int, heads: tuple[int, int], sweep: list[PrefillTuning],
               check: bool = False, block_size: int = BLOCK_SIZE) -> list[str]:
    """The launch the runtime picks and the `sweep` variants on one shape; SDPA beside fresh prompts; with `check`,
    each launch's largest difference from the reference before its time."""
    tokens = seqs * length
    flops = causal_flops(seqs, length, prefix, heads[0])
    sdpa = time_sdpa(seqs, length, heads) if prefix == 0 else None
    sdpa_cells = "- | - | - | - |" if sdpa is None else \
        f"{sdpa:.3f} | {tokens / sdpa / 1e3:.2f} | {flops / sdpa / 1e9:.0f} |"
    inputs = chunk_inputs(seqs, length, prefix, heads, block_size)
    chosen = default_tuning(tokens, seqs, seqs * (prefix + length), block_size)  # the keys and pages, as the plan
    out = []
    for tuning in [chosen, *(t for t in sweep if t != chosen)]:
        run = lambda t=tuning: launch_paged_prefill(*inputs, scale=HEAD_DIM**-0.5, qk_clip=None, tuning=t)
        row = f"| {seqs} x {length} after {prefix} | {tuple(tuning)} |"
        try:
            row += f" max err {max_error(inputs, tuning):.1e} |" if check else ""
            ms = time_ms(run, graph=True)
            row += f" {ms:.3f} | {tokens / ms / 1e3:.2f} | {flops / ms / 1e9:.0f} | {sdpa_cells}"
            row += f" {sdpa / ms:.2f} |" if sdpa is not None else ""
        except Exception as exc:  # why: one failing variant must not cost the rest of the device run
            row += f" failed: {type(exc).__name__}: {str(exc)[:80]} |"
        out.append(row)
        print(row, flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", action="store_true", help="also time launch variants")
    parser.add_argument("--warp-specialized", action="store_true",
                        help="only the warp-specialized launches and their twins, checked, on 2,048-token chunks")
    parser.add_argument("--tma", action="store_true",
                        help="only the launches that can load tiles by TMA and their pointer twins, checked")
    parser.add_argument("--heads", type=int, nargs=2, default=[Q_HEADS, KV_HEADS], metavar=("QUERY", "KV"))
    parser.add_argument("--block-size", type=int, default=BLOCK_SIZE, help="tokens a page of the cache")
    add_record_args(parser)
    args = parser.parse_args()
    heads = (args.heads[0], args.heads[1])
    lines = [
        f"| seqs x tokens after cached ({args.block_size}-token pages) "
        "| launch (block_m, block_n, warps, stages, pack_gqa, warp_specialize, page_tma) "
        "| paged ms | paged Mtok/s | paged TFLOP/s | SDPA flash ms | SDPA Mtok/s | SDPA TFLOP/s | SDPA/paged |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    if args.warp_specialized or args.tma:
        lines[0] = lines[0].replace("| paged ms", "| check | paged ms")
        lines[1] += "---|"
        pairs, shapes = (ws_pairs(args.tma), [(1, 2048, 0), *PREFIXED[:2]]) if args.warp_specialized else \
            (tma_pairs(), [(1, 2048, 0), (4, 2048, 0), (16, 512, 0), (1, 8192, 0), *PREFIXED])
        for seqs, length, prefix in shapes:
            lines += shape_rows(seqs, length, prefix, heads, pairs, check=True, block_size=args.block_size)
    else:
        sweep = SWEEP if args.sweep else []
        for seqs, length, prefix in [(seqs, length, 0) for seqs, length in SHAPES] + PREFIXED:
            lines += shape_rows(seqs, length, prefix, heads, sweep, block_size=args.block_size)
    title = f"Paged prefill attention vs SDPA flash ({heads[0]} / {heads[1]} heads; kernels, issue 3)"
    table = header(title) + "\n" + "\n".join(lines)
    print("\n" + table)
    if args.record:
        record(table + "\n", args.results)


if __name__ == "__main__":
    main()
