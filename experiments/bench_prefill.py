"""Paged prefill (flash) attention vs torch SDPA's flash backend on contiguous inputs.

    python -m experiments.bench_prefill [--sweep] [--record] [--results experiments/RESULTS.md]

Fresh causal prompts (no cached prefix), 32 query / 8 kv heads, head_dim 128, bf16; the paged
kernel reads K/V from a block-size-16 cache whose tables are a random permutation of the pool.
Reports tokens/s and TFLOP/s (causal: 2 matmuls x 2 FLOP x L(L+1)/2 x D per head) of each and the
ratio SDPA time / paged time (>= 1.0 means the paged kernel is as fast). The first row per shape is
the launch `paged_prefill` picks; `--sweep` adds variants. Times are CUDA-graph replays (device time,
without Python launch overhead, which would dominate the 512-token case).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from experiments.record import add_record_args, header, record
from experiments.timing import time_ms
from kernels.paged_prefill import PrefillTuning, default_tuning, launch_paged_prefill

Q_HEADS, KV_HEADS, HEAD_DIM, BLOCK_SIZE = 32, 8, 128, 16
SHAPES = [(1, 512), (1, 1024), (1, 2048), (1, 4096), (1, 8192), (16, 512), (4, 2048)]  # (sequences, length)
SWEEP = [PrefillTuning(m, n, w, s) for m, n, w, s in [
    (64, 64, 4, 3), (128, 128, 8, 3), (128, 64, 8, 3), (64, 64, 4, 4), (64, 32, 4, 3), (128, 128, 8, 2),
    (64, 64, 8, 3), (128, 64, 4, 4),
]]  # fmt: skip


def paged_inputs(seqs: int, length: int):
    blocks = seqs * length // BLOCK_SIZE
    k_cache = torch.randn(blocks, BLOCK_SIZE, KV_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    v_cache = torch.randn_like(k_cache)
    tables = torch.randperm(blocks, device="cuda").view(seqs, -1).to(torch.int32)
    qsl = torch.arange(0, seqs * length + 1, length, device="cuda", dtype=torch.int32)
    lens = torch.full((seqs,), length, device="cuda", dtype=torch.int32)
    query = torch.randn(seqs * length, Q_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    return query, k_cache, v_cache, tables, qsl, lens


def time_sdpa(seqs: int, length: int) -> float:
    q = torch.randn(seqs, Q_HEADS, length, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(seqs, KV_HEADS, length, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        try:
            return time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True), graph=True)
        except RuntimeError:  # why: a flash build without GQA support; expanded K/V cost it the same FLOPs
            k, v = (t.repeat_interleave(Q_HEADS // KV_HEADS, dim=1) for t in (k, v))
            return time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), graph=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", action="store_true", help="also time launch variants")
    add_record_args(parser)
    args = parser.parse_args()
    lines = [
        "| seqs x tokens | launch (block_m, block_n, warps, stages) | paged ms | paged Mtok/s | paged TFLOP/s "
        "| SDPA flash ms | SDPA Mtok/s | SDPA TFLOP/s | SDPA/paged |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for seqs, length in SHAPES:
        tokens = seqs * length
        flops = seqs * Q_HEADS * 4 * HEAD_DIM * length * (length + 1) / 2
        sdpa = time_sdpa(seqs, length)
        inputs = paged_inputs(seqs, length)
        chosen = default_tuning(tokens, seqs)
        for tuning in [chosen, *(t for t in SWEEP if args.sweep and t != chosen)]:
            run = lambda t=tuning, inputs=inputs: launch_paged_prefill(
                *inputs, scale=HEAD_DIM**-0.5, qk_clip=None, tuning=t
            )
            row = f"| {seqs} x {length} | {tuple(tuning)} |"
            try:
                ms = time_ms(run, graph=True)
                row += (
                    f" {ms:.3f} | {tokens / ms / 1e3:.2f} | {flops / ms / 1e9:.0f} | {sdpa:.3f} | "
                    f"{tokens / sdpa / 1e3:.2f} | {flops / sdpa / 1e9:.0f} | {sdpa / ms:.2f} |"
                )
            except Exception as exc:  # why: one failing variant must not cost the rest of the device run
                row += f" failed: {type(exc).__name__}: {str(exc)[:80]} |"
            lines.append(row)
            print(row, flush=True)
    table = header("Paged prefill attention vs SDPA flash on contiguous inputs (kernels, issue 3)")
    table += "\n" + "\n".join(lines)
    print("\n" + table)
    if args.record:
        record(table + "\n", args.results)


if __name__ == "__main__":
    main()
