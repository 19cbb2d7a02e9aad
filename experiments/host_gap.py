"""Where a decode step's host time goes on the GPU machine: the work the GPU waits on between two steps.

    python -m experiments.host_gap [--model qwen2-7b] [--seqs 8 64] [--steps 200] [--async]

For each batch size, `--seqs` requests of `--prompt-len` random tokens are prefilled, then `--steps` pure
decode steps (CUDA graphs, as served) are timed piece by piece with perf_counter (medians, ms):

    schedule   Scheduler.schedule()
    stage      DecodeGraphs._stage: the inputs into pinned buffers
    launch     the rest of DecodeGraphs.run and compute_logits: copies and the replay, queued
    wait       the sampler until its tokens reach the host (the GPU finishing the step)
    post       the rest of the engine's postprocess (bookkeeping, stop checks, outputs)
    record     the step's stats
    gap        wall - wait: host time the GPU does not overlap (its idle time between steps, roughly)

`--async` runs the engine with `scheduler.async_scheduling` (runtime.overlap), whose step has other phases:

    drain      OverlapStepper.drain: the previous step's tokens to the host (its event) and their bookkeeping
    sample     OverlapStepper._sample: computed tokens, the draws queued on the device

Both modes also measure the GPU's idle time between steps directly: a CUDA event before each step's forward is
launched and one after it; the time from one step's end event to the next one's start event is the time the GPU
had nothing queued (it includes the few sampling kernels between them). `idle` is its median per step, `idle
share` the sum over the sum of walls. Run the script once per mode in the same device call to compare them.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

from experiments.timing import time_phase
from runtime import LLM, LLMEngine, RequestOutputKind, SamplingParams
from runtime.model.presets import preset_config

PHASES = (("scheduler", "schedule", "schedule"), ("graphs", "_stage", "stage"), ("graphs", "run", "run"),
          ("sampler", "sample", "wait"), ("engine", "_postprocess", "postprocess"), ("engine", "_record", "record"))
COLUMNS = ("schedule", "stage", "launch", "wait", "post", "record", "gap", "gap share")
ASYNC_COLUMNS = ("schedule", "stage", "launch", "drain", "sample", "record")
ASYNC_PHASES = (("scheduler", "schedule", "schedule"), ("graphs", "_stage", "stage"), ("graphs", "run", "run"),
                ("overlap", "drain", "drain"), ("overlap", "_sample", "sample"), ("engine", "_record", "record"))


class GpuIdle:
    """CUDA events around each step's forward (`runner.execute`): the GPU's idle time between two steps."""

    def __init__(self, runner: Any) -> None:
        self.runner, self.inner = runner, runner.execute
        self.events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        runner.execute = self._execute

    def _execute(self, *args: Any) -> Any:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = self.inner(*args)
        end.record()
        self.events.append((start, end))
        return out

    def gaps_ms(self) -> list[float]:
        """Per step after the first: ms from the previous step's end to this one's start (on the GPU)."""
        torch.cuda.synchronize()
        pairs = self.events
        return [pairs[i - 1][1].elapsed_time(pairs[i][0]) for i in range(1, len(pairs))]

    def remove(self) -> None:
        del self.runner.execute  # the class's method again


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


def step_phases(engine: LLMEngine, steps: int, overlapped: bool) -> dict[str, float]:
    """Median ms per step of each phase, of the whole step ("wall") and of the GPU's idle time ("idle"); the
    idle share ("share": summed idle over summed wall)."""
    owners = {"scheduler": engine.scheduler, "graphs": engine.runner.graphs, "sampler": engine.sampler,
              "engine": engine, "overlap": engine._overlap}
    phases = ASYNC_PHASES if overlapped else PHASES
    spent: dict[str, float] = {}
    for owner, name, phase in phases:
        time_phase(owners[owner], name, spent, phase)
    rows: list[dict[str, float]] = []
    torch.cuda.synchronize()
    idle = GpuIdle(engine.runner)
    for _ in range(steps):
        spent.clear()
        start = time.perf_counter()
        engine.step()
        rows.append({**spent, "wall": time.perf_counter() - start})
    gaps = idle.gaps_ms()
    idle.remove()
    for owner, name, _ in phases:
        delattr(owners[owner], name)  # the class's method again
    m = {k: statistics.median(r[k] for r in rows) * 1e3 for k in rows[0]}
    m["idle"] = statistics.median(gaps)
    m["share"] = sum(gaps) / (sum(r["wall"] for r in rows[1:]) * 1e3)
    return m


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen2-7b")
    parser.add_argument("--seqs", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--prompt-len", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--async", dest="overlapped", action="store_true",
                        help="scheduler.async_scheduling: the host builds step N+1 while the GPU runs step N")
    args = parser.parse_args()
    vocab = preset_config(args.model).vocab_size
    engine = LLM(model=args.model, max_model_len=4096, gpu_memory_utilization=0.9,
                 async_scheduling=args.overlapped).engine
    columns = ASYNC_COLUMNS if args.overlapped else COLUMNS
    print("| model | seqs | mode | wall | " + " | ".join(columns) + " | GPU idle | idle share |")
    print("|---" * (len(columns) + 6) + "|")
    for seqs in args.seqs:
        decoding(engine, seqs, args.prompt_len, args.steps, vocab)
        m = step_phases(engine, args.steps, args.overlapped)
        cells = [m["schedule"], m["stage"], m["run"] - m["stage"]]
        if args.overlapped:
            cells += [m["drain"], m["sample"], m["record"]]
        else:
            gap = m["wall"] - m["wait"]
            cells += [m["wait"], m["postprocess"] - m["wait"], m["record"], gap, f"{gap / m['wall']:.1%}"]
        row = [args.model, seqs, "async" if args.overlapped else "sync", m["wall"], *cells, m["idle"],
               f"{m['share']:.1%}"]
        print("| " + " | ".join(f"{c:.3f}" if isinstance(c, float) else str(c) for c in row) + " |", flush=True)

if __name__ == "__main__":
    main()
