"""Greedy tokens of one mixed workload across the engine's step paths, against synchronous eager stepping.

    python -m experiments.graph_agreement [--model llama-3.2-1b] [--budget 256] [--capture 512 2048]

Prompts of 20-400 random tokens under a small token budget (`--budget`), so steps mix prefill chunks with
decodes. Each variant (CUDA graphs off or on, synchronous or async scheduling, and with graphs each
`--capture` size) generates the same requests; the table gives each one's token agreement with synchronous
eager stepping (1.000: token for token), whether it ran the same steps (the scheduled token counts, step by
step: a different KV pool or schedule changes the GEMMs' shapes, and random weights' near-flat logits flip on
the last bit), its KV blocks and its steps by path. A variant whose agreement falls alone points at its path.

A second table separates numerics from a wrong result: each synchronous graphs variant's next-token
distributions against eager's at every position whose history both paths share (up to and including each
request's first differing token), as KL(eager || graphs). bf16 rounding gives a KL near 1e-5; a wrong row
(a stale input, another sequence's cache) gives one near the distribution's entropy.
"""

from __future__ import annotations

import argparse
from typing import NamedTuple

import torch

from runtime import LLM, EngineConfig, LLMEngine, SamplingParams


def prompts(n: int = 16) -> list[list[int]]:
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(20, 400, (n,), generator=gen).tolist()
    return [torch.randint(4, 32000, (k,), generator=gen).tolist() for k in lengths]


def agreement(a: list[list[int]], b: list[list[int]]) -> float:
    pairs = [(x, y) for s, t in zip(a, b) for x, y in zip(s, t)]
    return sum(x == y for x, y in pairs) / max(1, len(pairs))


def run(model: str, budget: int, **knobs) -> tuple[list[list[int]], list[int], int, dict[str, int]]:
    """Tokens, the scheduled token count of each step, the KV pool's blocks and the steps by path."""
    llm = LLM(model=model, gpu_memory_utilization=0.3, max_model_len=1024, max_num_batched_tokens=budget, **knobs)
    steps: list[int] = []
    scheduler = llm.engine.scheduler
    schedule = scheduler.schedule

    def logged(*args, **kwargs):
        out = schedule(*args, **kwargs)
        steps.append(out.num_batched_tokens)
        return out

    scheduler.schedule = logged
    params = SamplingParams(max_tokens=48, temperature=0.0, ignore_eos=True)
    tokens = [o.outputs[0].token_ids for o in llm.generate(prompts(), params, use_tqdm=False)]
    blocks = sum(t.num_blocks for t in llm.engine.kv.tiers)
    paths = dict(llm.engine.runner.paths)
    del llm
    torch.cuda.empty_cache()
    return tokens, steps, blocks, paths


class Distributions(NamedTuple):
    tokens: list[list[int]]  # greedy tokens per request
    rows: list[torch.Tensor]  # per request, each generated position's log-distribution [n_tokens, V]
    paths: dict[str, int]  # steps by path


def distributions(model: str, budget: int, **knobs) -> Distributions:
    """The requests' greedy tokens and next-token log-distributions under `knobs` (an EngineConfig's flat keys)."""
    config = EngineConfig.from_flat(model, gpu_memory_utilization=0.3, max_model_len=1024,
                                    max_num_batched_tokens=budget, **knobs)
    engine = LLMEngine(config, record_logprobs=True)
    params = SamplingParams(max_tokens=48, temperature=0.0, ignore_eos=True)
    requests = prompts()
    for i, prompt in enumerate(requests):
        engine.add_request(str(i), prompt, params)
    while engine.has_unfinished_requests():
        engine.step()
    rows = [torch.stack(engine.logprobs[str(i)]).float().cpu() for i in range(len(requests))]
    paths = dict(engine.runner.paths)
    del engine
    torch.cuda.empty_cache()
    return Distributions([r.argmax(-1).tolist() for r in rows], rows, paths)


def kl(p: torch.Tensor, q: torch.Tensor) -> float:
    """KL(p || q) of two log-distributions [V]."""
    return float((p.exp() * (p - q)).sum())


def shared_history_kls(ref: Distributions, other: Distributions) -> list[float]:
    """KL(ref || other) at every position whose history both share (up to and including each request's first
    differing token)."""
    kls = []
    for t_ref, t_other, r, o in zip(ref.tokens, other.tokens, ref.rows, other.rows):
        for pos in range(min(len(t_ref), len(t_other))):
            kls.append(kl(r[pos], o[pos]))
            if t_ref[pos] != t_other[pos]:
                break
    return kls


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
    print(f"| variant ({args.model}, budget {args.budget}) | agreement with eager, sync | same steps | KV blocks "
          "| steps by path |")
    print("|---|---|---|---|---|")
    for name, knobs in variants:
        tokens, steps, blocks, paths = run(args.model, args.budget, **knobs)
        reference = reference or (tokens, steps)
        same = "yes" if steps == reference[1] else f"no ({len(steps)} steps against {len(reference[1])})"
        print(f"| {name} | {agreement(reference[0], tokens):.3f} | {same} | {blocks} | {paths} |", flush=True)
    eager = distributions(args.model, args.budget, cuda_graphs=False, async_scheduling=False)
    print(f"\n| synchronous ({args.model}, budget {args.budget}) | KL(eager \\|\\| graphs) mean | max | positions |")
    print("|---|---|---|---|")
    for size in args.capture:
        kls = shared_history_kls(eager, distributions(args.model, args.budget, cuda_graphs=True, async_scheduling=False,
                                                      max_cudagraph_capture_size=size))
        print(f"| graphs to {size} | {sum(kls) / len(kls):.2e} | {max(kls):.2e} | {len(kls)} |", flush=True)


if __name__ == "__main__":
    main()
