"""Paged decode attention vs torch SDPA on contiguous K/V, at the ANCHORS shapes.

    python -m experiments.bench_decode [--sweep] [--record] [--results experiments/RESULTS.md]

Both read the same K+V bytes (B x ctx x Hkv x D x 2 bytes x 2): the table gives each one's time and
achieved TB/s, next to a device-to-device copy ceiling measured in the same run (bytes read +
written), and the ratio SDPA time / paged time (>= 1.0 means the paged kernel is as fast). The paged
cache's block tables are a random permutation of the pool, as after a long serving run.
`--sweep` also times launch variants at block size 16. Times are medians of CUDA events around
eager calls (each call is long enough to hide its launch).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from experiments.paged import paged_inputs
from experiments.record import add_record_args, header, record
from experiments.timing import copy_ceiling_tbs, time_ms
from kernels.paged_decode import DecodeTuning, _num_partitions, launch_paged_decode

SHAPES = [(64, 4096), (256, 1024), (8, 32768), (16, 8192)]  # (batch, context): ANCHORS, then few long ones
Q_HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
BLOCK_SIZES = [8, 16, 32]
SPLIT_KV_MIN_LEN = 2048  # the runtime default
SWEEP = [DecodeTuning(*t) for t in [
    (64, 1, 256, 4, 3), (64, 4, 256, 4, 3), (64, 8, 256, 4, 3), (64, 2, 256, 4, 2), (64, 2, 256, 4, 4),
    (128, 2, 256, 4, 3), (32, 2, 256, 4, 3),
]]  # fmt: skip


def time_paged(query, kv, tuning: DecodeTuning, split_min: int = SPLIT_KV_MIN_LEN) -> float:
    run = lambda: launch_paged_decode(
        query, *kv, scale=HEAD_DIM**-0.5, qk_clip=None, split_kv_min_len=split_min, tuning=tuning
    )
    return time_ms(run, graph=False)


def runs_for(block_size: int, ctx: int, sweep: bool) -> list[tuple[DecodeTuning, int, torch.dtype]]:
    """(launch, split_kv_min_len, cache dtype) to time: the defaults at every block size; at 16 also
    split-KV off (where it would split) and an fp8 cache, and with --sweep the launch variants."""
    runs = [(DecodeTuning(), SPLIT_KV_MIN_LEN, torch.bfloat16)]
    if block_size == 16:
        runs += [(DecodeTuning(), 10**6, torch.bfloat16)] if ctx > SPLIT_KV_MIN_LEN else []
        runs += [(DecodeTuning(), SPLIT_KV_MIN_LEN, torch.float8_e4m3fn)]
        runs += [(t, SPLIT_KV_MIN_LEN, torch.bfloat16) for t in SWEEP] if sweep else []
    return runs


def time_sdpa(batch: int, ctx: int) -> float:
    q = torch.randn(batch, Q_HEADS, 1, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(batch, KV_HEADS, ctx, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    return time_ms(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), graph=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", action="store_true", help="also time launch variants at block size 16")
    add_record_args(parser)
    args = parser.parse_args()
    copy = copy_ceiling_tbs()
    lines = [
        "| batch x ctx | block | cache | launch (block_n, programs/SM, min_partition, warps, stages) "
        "| split_kv_min_len | partitions | paged ms | paged TB/s | SDPA ms | SDPA TB/s | SDPA/paged | copy TB/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for batch, ctx in SHAPES:
        sdpa = time_sdpa(batch, ctx)
        sdpa_tbs = batch * ctx * KV_HEADS * HEAD_DIM * 2 * 2 / sdpa / 1e9
        query = torch.randn(batch, Q_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        for block_size in BLOCK_SIZES:
            for tuning, split_min, dtype in runs_for(block_size, ctx, args.sweep):
                kv = paged_inputs(batch, ctx, block_size, dtype, kv_heads=KV_HEADS, head_dim=HEAD_DIM)
                kv_bytes = 2 * kv[0].numel() * kv[0].element_size()  # K + V, as stored
                parts = _num_partitions(batch * KV_HEADS, ctx, tuning, query.device) if ctx > split_min else 1
                row = f"| {batch} x {ctx} | {block_size} | {str(dtype)[6:]} | {tuple(tuning)} | {split_min} | {parts} |"
                try:
                    ms = time_paged(query, kv, tuning, split_min)
                    row += (
                        f" {ms:.3f} | {kv_bytes / ms / 1e9:.2f} | {sdpa:.3f} | {sdpa_tbs:.2f} | {sdpa / ms:.2f} "
                        f"| {copy:.2f} |"
                    )
                except Exception as exc:  # why: one failing variant must not cost the rest of the device run
                    row += f" failed: {type(exc).__name__}: {str(exc)[:80]} |"
                lines.append(row)
                print(row, flush=True)
                del kv
    table = header("Paged decode attention vs SDPA on contiguous KV (kernels, issue 3)") + "\n" + "\n".join(lines)
    print("\n" + table)
    if args.record:
        record(table + "\n", args.results)


if __name__ == "__main__":
    main()
