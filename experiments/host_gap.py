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

import torch

from experiments.timing import time_phase
from runtime import LLM, LLMEngine, RequestOutputKind, SamplingParams
from runtime.model.presets import preset_config

PHASES = (("scheduler", "schedule", "schedule"), ("graphs", "_stage", "stage"), ("graphs", "run", "run"),
          ("sampler", "sample", "wait"), ("engine", "_postprocess", "postprocess"), ("engine", "_record", "record"))


def decoding(engine: LLMEngine, seqs: int, prompt_len: int, steps: int, vocab: int) -> None:
    """`seqs` requests admitted and prefilled: every step from here is a pure decode step."""
    engine.reset()
    gen = torch.Generator().manual_seed(seqs)
    params = SamplingParams(max_tokens=steps + 50, temperature=0.0, ignore_eos=True,
                            output_kind=RequestOutputKind.FINAL_ONLY)
    for i in range(seqs):
        engine.add_request(f"s{seqs}-{i}", torch.randint(0, vocab, (prompt_len,), generator=gen).tolist(), params)
    sched = engine.scheduler
    while sched.waiting or any(s.num_computed_tokens < s.num_prompt_tokens for s in sched.running):
        engine.step()
    for _ in range(5):
        engine.step()


def step_phases(engine: LLMEngine, steps: int) -> dict[str, float]:
    """Median ms per step of each phase, and of the whole step ("wall")."""
    owners = {"scheduler": engine.scheduler, "graphs": engine.runner.graphs, "sampler": engine.sampler,
              "engine": engine}
    spent: dict[str, float] = {}
    for owner, name, phase in PHASES:
        time_phase(owners[owner], name, spent, phase)
    rows: list[dict[str, float]] = []
    torch.cuda.synchronize()
    for _ in range(steps):
        spent.clear()
        start = time.perf_counter()
        engine.step()
        rows.append({**spent, "wall": time.perf_counter() - start})
    for owner, name, _ in PHASES:
        delattr(owners[owner], name)  # the class's method again
    return {k: statistics.median(r[k] for r in rows) * 1e3 for k in rows[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen2-7b")
    parser.add_argument("--seqs", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--prompt-len", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    vocab = preset_config(args.model).vocab_size
    engine = LLM(model=args.model, max_model_len=4096, gpu_memory_utilization=0.9).engine
    print("| model | seqs | wall | schedule | stage | launch | wait | post | record | gap | gap share |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for seqs in args.seqs:
        decoding(engine, seqs, args.prompt_len, args.steps, vocab)
        m = step_phases(engine, args.steps)
        launch, post, gap = m["run"] - m["stage"], m["postprocess"] - m["wait"], m["wall"] - m["wait"]
        print(f"| {args.model} | {seqs} | {m['wall']:.3f} | {m['schedule']:.3f} | {m['stage']:.3f} | {launch:.3f} "
              f"| {m['wait']:.3f} | {post:.3f} | {m['record']:.3f} | {gap:.3f} | {gap / m['wall']:.1%} |", flush=True)


if __name__ == "__main__":
    main()
