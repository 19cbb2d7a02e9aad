"""Greedy tokens of one mixed workload across the engine's step paths, against synchronous eager stepping.

    python -m experiments.graph_agreement [--model llama-3.2-1b] [--budget 256] [--capture 512 2048]

Prompts of 20-400 random tokens under a small token budget (`--budget`), so steps mix prefill chunks with
decodes. Each variant (CUDA graphs off or on, synchronous or async scheduling, and with graphs each
`--capture` size) generates the same requests; the table gives each one's token agreement with synchronous
eager stepping (1.000: token for token) and its steps by path. A variant whose agreement falls alone points
at its path.
"""

from __future__ import annotations

import argparse

import torch

from runtime import LLM, SamplingParams


def prompts(n: int = 16) -> list[list[int]]:
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(20, 400, (n,), generator=gen).tolist()
    return [torch.randint(4, 32000, (k,), generator=gen).tolist() for k in lengths]


def agreement(a: list[list[int]], b: list[list[int]]) -> float:
    pairs = [(x, y) for s, t in zip(a, b) for x, y in zip(s, t)]
    return sum(x == y for x, y in pairs) / max(1, len(pairs))


def run(model: str, budget: int, **knobs) -> tuple[list[list[int]], dict[str, int]]:
    llm = LLM(model=model, gpu_memory_utilization=0.3, max_model_len=1024, max_num_batched_tokens=budget, **knobs)
    params = SamplingParams(max_tokens=48, temperature=0.0, ignore_eos=True)
    tokens = [o.outputs[0].token_ids for o in llm.generate(prompts(), params, use_tqdm=False)]
    paths = dict(llm.engine.runner.paths)
    del llm
    torch.cuda.empty_cache()
    return tokens, paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama-3.2-1b")
    ap.add_argument("--budget", type=int, default=256)
    ap.add_argument("--capture", type=int, nargs="+", default=[512, 2048])
    args = ap.parse_args()
    variants = [("eager, sync", dict(cuda_graphs=False, async_scheduling=False)),
                ("eager, async", dict(cuda_graphs=False, async_scheduling=True))]
    for size in args.capture:
        for mode in (False, True):
            variants.append((f"graphs to {size}, {'async' if mode else 'sync'}",
                             dict(cuda_graphs=True, async_scheduling=mode, max_cudagraph_capture_size=size)))
    reference = None
    print(f"| variant ({args.model}, budget {args.budget}) | agreement with eager, sync | steps by path |")
    print("|---|---|---|")
    for name, knobs in variants:
        tokens, paths = run(args.model, args.budget, **knobs)
        reference = reference or tokens
        print(f"| {name} | {agreement(reference, tokens):.3f} | {paths} |", flush=True)


if __name__ == "__main__":
    main()
