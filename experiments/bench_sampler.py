"""Sampler time per decode step: the per-row fp32 path against `kernel.sampler_half_topk`.

256 rows of Llama-3 vocabulary logits (bf16 values upcast to fp32, as `compute_logits` returns),
every row a seeded request with top-k (and optionally top-p). Times one `Sampler.sample` call, which
ends with the tokens on the host (a device sync), as the engine's step does. Greedy is the floor.

    python -m experiments.bench_sampler [--rows 256] [--record]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from experiments.record import add_record_args, header, record
from runtime.sampler import Sampler
from runtime.sampling_params import SamplingParams

VOCAB = 128256


def time_sampler(sampler: Sampler, logits: torch.Tensor, params: SamplingParams, repeats: int) -> float:
    rows = [[(i, i, params)] for i in range(logits.shape[0])]
    sampler.sample(logits, rows)  # warm up (generators, kernels)
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        sampler.sample(logits, rows)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=10)
    add_record_args(parser)
    args = parser.parse_args()
    gen = torch.Generator(device="cuda").manual_seed(0)
    logits = (torch.randn(args.rows, VOCAB, device="cuda", generator=gen) * 3).bfloat16().float()
    cases = [("greedy", SamplingParams(temperature=0.0)), ("top_k 50", SamplingParams(temperature=0.8, top_k=50)),
             ("top_k 50, top_p 0.95", SamplingParams(temperature=0.8, top_k=50, top_p=0.95))]
    lines = ["| rows x vocab | sampling | per-row fp32 ms | sampler_half_topk ms | speed-up |", "|---|---|---|---|---|"]
    for name, params in cases:
        slow = time_sampler(Sampler(half_topk=False), logits, params, args.repeats)
        fast = time_sampler(Sampler(half_topk=True), logits, params, args.repeats)
        lines.append(f"| {args.rows} x {VOCAB} | {name} | {slow * 1e3:.2f} | {fast * 1e3:.2f} | {slow / fast:.1f}x |")
        print(lines[-1], flush=True)
    table = "\n".join(lines)
    print(table)
    if args.record:
        record(header("Sampler per decode step: per-row fp32 vs sampler_half_topk") + "\n" + table + "\n", args.results)


if __name__ == "__main__":
    main()
