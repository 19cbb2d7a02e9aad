"""Fused layer kernels against the unfused torch ops they replace (Llama-3-8B dimensions, bf16).

Per op and token count: the torch reference (what the CPU path and the model ran before fusion)
and the Triton kernel, both timed as CUDA-graph replays (device time, no launch overhead), with the
Triton kernel's achieved bandwidth (bytes it must read and write) and the device copy ceiling.

    RMSNorm + residual add   x, residual [T, 4096] -> normed, residual'
    rotary q + k             q [T, 32, 128], k [T, 8, 128] (views of the fused qkv output), cos/sin [T, 128]
    silu_and_mul             gate_up [T, 2 x 14336] -> [T, 14336]

    python -m experiments.bench_layers [--record]
"""

from __future__ import annotations

import argparse

import torch

from experiments.record import add_record_args, header, record
from experiments.timing import copy_ceiling_tbs, time_ms
from kernels.activation import silu_and_mul, silu_and_mul_reference
from kernels.norm import rms_norm, rms_norm_reference
from kernels.rotary import apply_rotary, apply_rotary_reference

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTER = 4096, 32, 8, 128, 14336
BF16 = torch.bfloat16


def cases(tokens: int):
    """(name, torch fn, triton fn, bytes the fused kernel moves)."""
    x = torch.randn(tokens, HIDDEN, device="cuda", dtype=BF16)
    res = torch.randn_like(x)
    w = torch.randn(HIDDEN, device="cuda", dtype=BF16)
    yield ("RMSNorm + residual add", lambda: rms_norm_reference(x, w, 1e-5, res), lambda: rms_norm(x, w, 1e-5, res),
           4 * x.numel() * 2)
    qkv = torch.randn(tokens, (HEADS + 2 * KV_HEADS) * HEAD_DIM, device="cuda", dtype=BF16)
    q = qkv[:, : HEADS * HEAD_DIM].view(tokens, HEADS, HEAD_DIM)
    k = qkv[:, HEADS * HEAD_DIM : (HEADS + KV_HEADS) * HEAD_DIM].view(tokens, KV_HEADS, HEAD_DIM)
    cos, sin = (torch.randn(tokens, HEAD_DIM, device="cuda", dtype=BF16) for _ in range(2))
    yield ("rotary q + k", lambda: (apply_rotary_reference(q, cos, sin), apply_rotary_reference(k, cos, sin)),
           lambda: (apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)), 2 * (q.numel() + k.numel()) * 2)
    gate_up = torch.randn(tokens, 2 * INTER, device="cuda", dtype=BF16)
    yield ("silu_and_mul", lambda: silu_and_mul_reference(gate_up), lambda: silu_and_mul(gate_up),
           3 * tokens * INTER * 2)


def timed(fn) -> float:
    fn()  # compile outside any capture
    try:
        return time_ms(fn, graph=True)
    except Exception:  # why: fall back to eager timing rather than lose the row
        return time_ms(fn, graph=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", default="256,8192")
    add_record_args(parser)
    args = parser.parse_args()
    copy = copy_ceiling_tbs()
    lines = ["| op | tokens | torch ms | Triton ms | torch/Triton | Triton TB/s | copy TB/s |", "|---" * 7 + "|"]
    for tokens in (int(t) for t in args.tokens.split(",")):
        for name, ref, fused, nbytes in cases(tokens):
            slow, fast = timed(ref), timed(fused)
            lines.append(f"| {name} | {tokens} | {slow:.4f} | {fast:.4f} | {slow / fast:.2f} | "
                         f"{nbytes / fast / 1e9:.2f} | {copy:.2f} |")
            print(lines[-1], flush=True)
    table = "\n".join(lines)
    print(table)
    if args.record:
        record(header("Fused layer kernels vs unfused torch ops (llama-3-8b dimensions, bf16)") + "\n" + table + "\n",
               args.results)


if __name__ == "__main__":
    main()
