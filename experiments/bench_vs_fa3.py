"""pagetune's attention kernels against vLLM's FlashAttention 3 on the same paged caches (issue 28).

    python -m experiments.bench_vs_fa3 [--heads 28 4] [--out FILE.md]

Needs vLLM (0.26.0: its `vllm.vllm_flash_attn`, FlashAttention 3 on Hopper) beside the project; on the GPU
machine, after `bash experiments/gpu_vs_vllm.sh install`, with PYTHONPATH=/tmp/vsite:$PWD.

Both kernels read one cache, [num_blocks, 16, Hkv, 128] bf16 (the layout both take), through the same block
tables (a random permutation of the pool, as after a long serving run). Prefill: causal chunks after a cached
prefix (FA3 with `seqused_k` and the bottom-right causal alignment, as vLLM calls it); decode: one query per
sequence (FA3 as vLLM's decode steps call it, varlen with one query each; its own split heuristic). Times are
medians of CUDA-graph replays (device time). Each row also gives the largest difference between the two outputs,
so a faster kernel that computes something else shows.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from experiments.paged import paged_inputs
from experiments.timing import time_ms
from kernels.paged_decode import paged_decode
from kernels.paged_prefill import default_tuning, launch_paged_prefill

HEAD_DIM, BLOCK_SIZE, MAX_CONTEXT = 128, 16, 8192
PREFILL = [(1, 2048, 0), (4, 512, 0), (1, 2048, 2048), (1, 2048, 4096), (1, 2048, 6144), (2, 1024, 3072)]
DECODE = [(1, 1024), (1, 4096), (8, 4096), (64, 1024), (256, 512)]  # (sequences, context)


def fa3(q, k, v, tables, cu_q, lens, max_q: int, max_k: int):
    """vLLM's FlashAttention 3 over the paged cache, as its FlashAttentionImpl calls it."""
    from vllm.vllm_flash_attn import flash_attn_varlen_func

    return flash_attn_varlen_func(
        q=q, k=k, v=v, max_seqlen_q=max_q, cu_seqlens_q=cu_q, max_seqlen_k=max_k, seqused_k=lens,
        softmax_scale=HEAD_DIM**-0.5, causal=True, block_table=tables, fa_version=3,
    )  # fmt: skip


def prefill_row(seqs: int, chunk: int, prefix: int, heads: tuple[int, int]) -> str:
    ctx = prefix + chunk
    k, v, tables, lens = paged_inputs(seqs, ctx, BLOCK_SIZE, kv_heads=heads[1], head_dim=HEAD_DIM)
    q = torch.randn(seqs * chunk, heads[0], HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    cu_q = torch.arange(0, seqs * chunk + 1, chunk, device="cuda", dtype=torch.int32)
    tuning = default_tuning(seqs * chunk, seqs, seqs * ctx)
    ours = lambda: launch_paged_prefill(q, k, v, tables, cu_q, lens, scale=HEAD_DIM**-0.5, qk_clip=None, tuning=tuning)
    theirs = lambda: fa3(q, k, v, tables, cu_q, lens, chunk, ctx)
    flops = seqs * heads[0] * 4 * HEAD_DIM * chunk * (prefix + (chunk + 1) / 2)
    return _row(f"prefill {seqs} x {chunk} after {prefix}", ours, theirs, flops, "TFLOP/s", 1e9)


def decode_row(seqs: int, ctx: int, heads: tuple[int, int]) -> str:
    k, v, tables, lens = paged_inputs(seqs, ctx, BLOCK_SIZE, kv_heads=heads[1], head_dim=HEAD_DIM)
    q = torch.randn(seqs, heads[0], HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    cu_q = torch.arange(seqs + 1, device="cuda", dtype=torch.int32)
    ours = lambda: paged_decode(q, k, v, tables, lens, scale=HEAD_DIM**-0.5, split_kv_min_len=256,
                                max_context=MAX_CONTEXT)
    theirs = lambda: fa3(q, k, v, tables, cu_q, lens, 1, ctx)
    kv_bytes = 2 * seqs * ctx * heads[1] * HEAD_DIM * 2
    return _row(f"decode {seqs} x {ctx}", ours, theirs, kv_bytes, "GB/s (K/V read)", 1e6)


def _row(name: str, ours, theirs, work: float, unit: str, per_ms: float) -> str:
    try:
        diff = (ours().float() - theirs().float()).abs().max().item()
        ms_ours, ms_fa3 = time_ms(ours, graph=True), time_ms(theirs, graph=True)
    except Exception as exc:  # why: one failing shape must not cost the rest of the device run
        return f"| {name} | failed: {type(exc).__name__}: {str(exc)[:120]} |"
    return (f"| {name} | {ms_ours:.3f} | {ms_fa3:.3f} | {work / ms_ours / per_ms:,.0f} | {work / ms_fa3 / per_ms:,.0f} "
            f"| {unit} | {ms_fa3 / ms_ours:.2f} | {diff:.1e} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heads", type=int, nargs=2, default=[28, 4], metavar=("QUERY", "KV"))
    parser.add_argument("--out", type=Path, default=None, help="also write the table to this file")
    args = parser.parse_args()
    heads = (args.heads[0], args.heads[1])
    import vllm

    lines = [f"pagetune's attention kernels vs vLLM {vllm.__version__}'s FlashAttention 3, {heads[0]} / {heads[1]} "
             f"heads, head_dim {HEAD_DIM}, block size {BLOCK_SIZE}, bf16; {torch.cuda.get_device_name()}, torch "
             f"{torch.__version__}", "",
             "| shape | pagetune ms | FA3 ms | pagetune rate | FA3 rate | unit | FA3 / pagetune time | max abs diff |",
             "|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    for seqs, chunk, prefix in PREFILL:
        lines.append(prefill_row(seqs, chunk, prefix, heads))
        print(lines[-1], flush=True)
    for seqs, ctx in DECODE:
        lines.append(decode_row(seqs, ctx, heads))
        print(lines[-1], flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
