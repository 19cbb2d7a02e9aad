"""GPU kernel time inside one engine step, by kernel (torch.profiler), for a prefill and a decode step.

Admits `--seqs` prompts of `--prompt-len` random tokens (Llama-3-8B shape, random bf16 weights,
eager: no CUDA graphs, so every kernel shows), profiles the first full prefill step, runs the
prefill to the end, then profiles `--decode-steps` pure decode steps. Prints, per step kind, the
CUDA time per step of the top kernels and their share, next to the step's wall time.

    python experiments/profile_step.py [--seqs 128] [--prompt-len 1300] [--record]
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

from experiments.record import add_record_args, header, record
from runtime import LLM, SamplingParams
from runtime.model.presets import preset_config


def profiled(engine, steps: int) -> tuple[float, list[tuple[str, float, int]]]:
    """Wall ms per step, and (kernel, CUDA ms per step, calls per step) sorted by time."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            engine.step()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - start) / steps * 1e3
    kernels = [(e.key, e.device_time_total / 1e3 / steps, e.count // steps) for e in prof.key_averages()
               if e.device_time_total > 0]
    return wall, sorted(kernels, key=lambda k: -k[1])


def rows(kind: str, wall: float, kernels: list[tuple[str, float, int]], top: int) -> list[str]:
    total = sum(ms for _, ms, _ in kernels)
    out = [f"| {kind} | (all kernels) | {total:.2f} | 100% | wall {wall:.2f} ms/step |"]
    for name, ms, calls in kernels[:top]:
        out.append(f"| {kind} | `{name[:90]}` | {ms:.3f} | {ms / max(total, 1e-9):.1%} | {calls} calls |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="llama-3-8b")
    parser.add_argument("--seqs", type=int, default=128)
    parser.add_argument("--prompt-len", type=int, default=1300)
    parser.add_argument("--budget", type=int, default=8192, help="max_num_batched_tokens")
    parser.add_argument("--decode-steps", type=int, default=5)
    parser.add_argument("--top", type=int, default=14)
    add_record_args(parser)
    args = parser.parse_args()
    vocab = preset_config(args.model).vocab_size
    llm = LLM(model=args.model, max_num_seqs=max(256, args.seqs), max_num_batched_tokens=args.budget,
              max_model_len=4096, gpu_memory_utilization=0.9, cuda_graphs=False)
    engine = llm.engine
    llm.generate([[1] * 64] * 4, SamplingParams(max_tokens=4, temperature=0.0), use_tqdm=False)  # compile
    gen = torch.Generator().manual_seed(0)
    for i in range(args.seqs):
        prompt = torch.randint(0, vocab, (args.prompt_len,), generator=gen).tolist()
        engine.add_request(f"p{i}", prompt, SamplingParams(max_tokens=64, temperature=0.0, ignore_eos=True))
    lines = ["| step | kernel | CUDA ms per step | share | calls per step |", "|---|---|---|---|---|"]
    wall, kernels = profiled(engine, 1)
    lines += rows(f"prefill ({args.budget} tokens)", wall, kernels, args.top)
    sched = engine.scheduler
    while sched.waiting or any(s.num_computed_tokens < s.num_prompt_tokens for s in sched.running):
        engine.step()
    wall, kernels = profiled(engine, args.decode_steps)
    lines += rows(f"decode ({args.seqs} x ~{args.prompt_len})", wall, kernels, args.top)
    table = "\n".join(lines)
    print(table)
    if args.record:
        record(header(f"Kernel time per engine step ({args.model} shape, eager)") + "\n" + table + "\n", args.results)


if __name__ == "__main__":
    main()
