"""Where a decode step's host time goes on the GPU machine: the work the GPU waits on between two steps.

    python -m experiments.host_gap [--model qwen2-7b] [--seqs 8 64] [--steps 200]

For each batch size, `--seqs` requests of `--prompt-len` random tokens are prefilled, then `--steps` pure
decode steps (CUDA graphs, as served) are timed piece by piece with perf_counter (medians, ms):

    schedule   Scheduler.schedule()
    stage      DecodeGraphs._stage: the inputs into pinned buffers
    launch     the rest of DecodeGraphs.run and compute_logits: copies and the replay, queued
    wait       the sampler until its tokens reach the host (the GPU finishing the step)
    post       the rest of the engine's postprocess (bookkeeping, stop checks, outputs)
    record     the step's stats
    gap        wall - wait: host time the GPU does not overlap (its idle time between steps, roughly)
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

import torch

from runtime import LLM, RequestOutputKind, SamplingParams
from runtime.model.presets import preset_config


def timed(obj, name: str, into: dict[str, list[float]], key: str) -> None:
    inner = getattr(obj, name)

    def wrapper(*a, **kw):
        t = time.perf_counter()
        out = inner(*a, **kw)
        into[key].append((time.perf_counter() - t) * 1e3)
        return out

    setattr(obj, name, wrapper)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen2-7b")
    parser.add_argument("--seqs", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--prompt-len", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    vocab = preset_config(args.model).vocab_size
    llm = LLM(model=args.model, max_model_len=4096, gpu_memory_utilization=0.9)
    engine = llm.engine
    print("| model | seqs | wall | schedule | stage | launch | wait | post | record | gap | gap share |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for seqs in args.seqs:
        engine.reset()
        gen = torch.Generator().manual_seed(seqs)
        params = SamplingParams(max_tokens=args.steps + 50, temperature=0.0, ignore_eos=True,
                                output_kind=RequestOutputKind.FINAL_ONLY)
        for i in range(seqs):
            engine.add_request(f"s{seqs}-{i}", torch.randint(0, vocab, (args.prompt_len,), generator=gen).tolist(),
                               params)
        sched = engine.scheduler
        while sched.waiting or any(s.num_computed_tokens < s.num_prompt_tokens for s in sched.running):
            engine.step()
        for _ in range(5):
            engine.step()
        t: dict[str, list[float]] = defaultdict(list)
        graphs = engine.runner.graphs
        saved = (sched.schedule, graphs._stage, graphs.run, engine.sampler.sample, engine._postprocess, engine._record)
        timed(sched, "schedule", t, "schedule")
        timed(graphs, "_stage", t, "stage")
        timed(graphs, "run", t, "run")
        timed(engine.sampler, "sample", t, "wait")
        timed(engine, "_postprocess", t, "postprocess")
        timed(engine, "_record", t, "record")
        torch.cuda.synchronize()
        for _ in range(args.steps):
            s = time.perf_counter()
            engine.step()
            t["wall"].append((time.perf_counter() - s) * 1e3)
        (sched.schedule, graphs._stage, graphs.run, engine.sampler.sample, engine._postprocess,
         engine._record) = saved
        m = {k: statistics.median(v) for k, v in t.items()}
        launch = m["run"] - m["stage"]
        post = m["postprocess"] - m["wait"]
        gap = m["wall"] - m["wait"]
        print(f"| {args.model} | {seqs} | {m['wall']:.3f} | {m['schedule']:.3f} | {m['stage']:.3f} | {launch:.3f} "
              f"| {m['wait']:.3f} | {post:.3f} | {m['record']:.3f} | {gap:.3f} | {gap / m['wall']:.1%} |", flush=True)


if __name__ == "__main__":
    main()
