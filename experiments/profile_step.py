"""GPU kernel time inside one engine step, by kernel (torch.profiler), for a prefill and a decode step.

Admits `--seqs` prompts of `--prompt-len` random tokens (random bf16 weights of `--model`'s shape),
profiles the first full prefill step, times the next one unprofiled (its wall, and its forward's span on the
GPU from CUDA events: beside the kernel sum, the GPU's idle time inside a step), runs the prefill to the end,
then profiles `--decode-steps`
pure decode steps. Eager by default (every kernel launch shows); `--graphs` profiles the engine as
it serves (decode steps replay CUDA graphs). Prints, per step kind, the CUDA time per step of the top
kernels and of each kind of kernel (GEMM, attention, norm, ...), next to the step's wall time, and the
bandwidth floor of the step's weight reads.

    python -m experiments.profile_step [--model qwen2-7b] [--seqs 8] [--prompt-len 1800] [--graphs] [--record]
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

from experiments.host_gap import GpuIdle
from experiments.record import add_record_args, header, record
from runtime import LLM, SamplingParams
from runtime.model.presets import preset_config

KINDS = (  # kernel-name fragments -> kind, first match wins (attention before copy: "_prefill" holds "fill")
    ("gemm", ("gemm", "cutlass", "sm90_xmma", "nvjet", "cublas", "splitk")),
    ("attention", ("paged_decode", "paged_prefill", "_prefill_kernel", "_decode_kernel", "flash", "attention",
                   "_reduce")),
    ("norm", ("rms_norm",)),
    ("rotary", ("rotary",)),
    ("activation", ("silu",)),
    ("kv write", ("write_kv", "kv_write")),
    ("copy", ("copy", "memcpy", "memset", "fill", "index", "gather", "scatter", "cat")),
    ("sampling", ("argmax", "softmax", "max", "reduce", "sort", "topk")),
)


def kind_of(name: str) -> str:
    low = name.lower()
    return next((kind for kind, frags in KINDS if any(f in low for f in frags)), "other")


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


def forward_span(engine) -> tuple[float, float]:
    """One step unprofiled: its wall ms, and the GPU's ms from the forward's first launch to its end (CUDA events
    around `runner.execute`, `host_gap.GpuIdle`): beside the kernel sum, the time the GPU sat idle inside the step."""
    events = GpuIdle(engine.runner)
    try:
        wall = timed(engine, 1)
    finally:
        events.remove()
    torch.cuda.synchronize()
    start, end = events.events[0]
    return wall, start.elapsed_time(end)


def timed(engine, steps: int) -> float:
    """Wall ms per step without the profiler."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        engine.step()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps * 1e3


def rows(kind: str, wall: float, kernels: list[tuple[str, float, int]], top: int, floor_ms: float) -> list[str]:
    total = sum(ms for _, ms, _ in kernels)
    out = [f"| {kind} | (all kernels) | {total:.3f} | 100% | wall {wall:.3f} ms/step, weights floor "
           f"{floor_ms:.3f} ms |"]
    by_kind: dict[str, list[float]] = {}
    for name, ms, calls in kernels:
        acc = by_kind.setdefault(kind_of(name), [0.0, 0])
        acc[0] += ms
        acc[1] += calls
    for k, (ms, calls) in sorted(by_kind.items(), key=lambda kv: -kv[1][0]):
        out.append(f"| {kind} | kind: {k} | {ms:.3f} | {ms / max(total, 1e-9):.1%} | {calls} calls |")
    for name, ms, calls in kernels[:top]:
        out.append(f"| {kind} | `{name[:90]}` | {ms:.3f} | {ms / max(total, 1e-9):.1%} | {calls} calls |")
    return out


def weights_floor_ms(model) -> float:
    """Reading every weight a decode step reads once, at the H200's 4.8 TB/s: its lower bound (the embedding table
    is only gathered, a row a token, unless it is also the LM head)."""
    embed = model.model.embed_tokens.weight
    read = [p for p in model.parameters() if p is not embed or model.lm_head.weight is embed]
    return sum(p.numel() * p.element_size() for p in read) / 4.8e12 * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="llama-3-8b")
    parser.add_argument("--seqs", type=int, default=128)
    parser.add_argument("--prompt-len", type=int, default=1300)
    parser.add_argument("--budget", type=int, default=8192, help="max_num_batched_tokens")
    parser.add_argument("--decode-steps", type=int, default=5)
    parser.add_argument("--graphs", action="store_true", help="CUDA graphs on (the engine's default on a GPU)")
    parser.add_argument("--top", type=int, default=14)
    add_record_args(parser)
    args = parser.parse_args()
    vocab = preset_config(args.model).vocab_size
    llm = LLM(model=args.model, max_num_seqs=max(256, args.seqs), max_num_batched_tokens=args.budget,
              max_model_len=max(4096, args.prompt_len + 128), gpu_memory_utilization=0.9, cuda_graphs=args.graphs)
    engine = llm.engine
    llm.generate([[1] * 64] * 4, SamplingParams(max_tokens=4, temperature=0.0), use_tqdm=False)  # compile
    gen = torch.Generator().manual_seed(0)
    for i in range(args.seqs):
        prompt = torch.randint(0, vocab, (args.prompt_len,), generator=gen).tolist()
        engine.add_request(f"p{i}", prompt, SamplingParams(max_tokens=64, temperature=0.0, ignore_eos=True))
    floor = weights_floor_ms(engine.runner.model)
    mode = "graphs" if args.graphs else "eager"
    lines = ["| step | kernel | CUDA ms per step | share | calls per step |", "|---|---|---|---|---|"]
    wall, kernels = profiled(engine, 1)
    plain, span = forward_span(engine)  # the next chunk (a longer context), unprofiled
    lines += rows(f"prefill ({args.budget} tokens, {mode}; next chunk unprofiled: wall {plain:.3f} ms, forward on the "
                  f"GPU {span:.3f} ms)", wall, kernels, args.top, floor)
    sched = engine.scheduler
    while sched.waiting or any(s.num_computed_tokens < s.num_prompt_tokens for s in sched.running):
        engine.step()
    plain = timed(engine, args.decode_steps)
    wall, kernels = profiled(engine, args.decode_steps)
    lines += rows(f"decode ({args.seqs} x ~{args.prompt_len}, {mode}; unprofiled wall {plain:.3f} ms)", wall,
                  kernels, args.top, floor)
    table = "\n".join(lines)
    print(table, flush=True)
    if args.record:
        title = f"Kernel time per engine step ({args.model} shape, {mode})"
        record(header(title) + "\n" + table + "\n", args.results)


if __name__ == "__main__":
    main()
