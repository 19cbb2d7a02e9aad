"""Host time of the real engine per decode step, by output kind: what the GPU waits on between steps.

    python -m experiments.bench_engine_host [--seqs 256] [--steps 200] [--record]
                                            [--results experiments/RESULTS.md]

Two `LLMEngine`s on the `tiny` preset (CPU), each with `--seqs` greedy requests of 100-140 prompt
tokens, one with `output_kind` CUMULATIVE (vLLM's default: a `RequestOutput` per request per step)
and one with FINAL_ONLY (what `LLM.generate`, the replay and the quality probe use). After the
prefills, their decode steps alternate (so both see the same machine load) and each step is split:

    schedule      Scheduler.schedule()
    postprocess   LLMEngine._postprocess less the sampler: token bookkeeping, prefix-cache commits,
                  stop checks, the step's RequestOutputs
    record        the step's StepStats (KV usage)

Their sum is the host work of a step that no GPU work overlaps; the forward and the sampler are
timed apart and left out. Medians over `--steps` steps; the model does not matter to these columns.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import statistics

import torch

from experiments.record import add_record_args, command_line, record
from experiments.timing import time_phase
from runtime import LLM, LLMEngine, RequestOutputKind, SamplingParams

PHASES = ("schedule", "postprocess", "record")


class PhaseClock:
    """Wall time of an engine's phases during one step."""

    def __init__(self, engine: LLMEngine) -> None:
        self.spent: dict[str, float] = {}
        for obj, name, phase in ((engine.scheduler, "schedule", "schedule"), (engine, "_postprocess", "postprocess"),
                                 (engine.sampler, "sample", "sample"), (engine, "_record", "record")):
            time_phase(obj, name, self.spent, phase)

    def step(self, engine: LLMEngine) -> dict[str, float]:
        self.spent.clear()
        engine.step()
        spent = {p: 1e3 * self.spent.get(p, 0.0) for p in (*PHASES, "sample")}
        spent["postprocess"] -= spent.pop("sample")
        return spent


def running_engine(kind: RequestOutputKind, seqs: int) -> LLMEngine:
    """An engine with `seqs` requests past their prefill, all decoding."""
    engine = LLM("tiny", max_num_seqs=seqs, max_model_len=1024, block_size=16, max_num_batched_tokens=8192,
                 seed=0).engine
    rng = random.Random(0)
    params = SamplingParams(max_tokens=800, temperature=0.0, ignore_eos=True, output_kind=kind)
    for i in range(seqs):
        engine.add_request(f"r{i}", [rng.randrange(3, 500) for _ in range(rng.randint(100, 140))], params)
    while any(s.num_output_tokens == 0 for r in engine.requests.values() for s in r.seqs):
        engine.step()
    return engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seqs", type=int, default=256)
    parser.add_argument("--steps", type=int, default=200)
    add_record_args(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    kinds = list(RequestOutputKind)
    engines = {k: running_engine(k, args.seqs) for k in kinds}
    clocks = {k: PhaseClock(e) for k, e in engines.items()}
    samples: dict[RequestOutputKind, list[dict[str, float]]] = {k: [] for k in kinds}
    for _ in range(args.steps):
        for kind in kinds:
            samples[kind].append(clocks[kind].step(engines[kind]))
    lines = [
        f"## Engine host time per decode step by output kind (CPU, {args.seqs} sequences)\n",
        f"{datetime.date.today().isoformat()}, {platform.platform()}, {os.cpu_count()} CPUs (shared with other "
        f"jobs), Python {platform.python_version()}, torch {torch.__version__}. {args.steps} decode steps per "
        "engine, alternating.",
        f"Command: `{command_line()}`\n",
        "| output_kind | schedule ms | postprocess ms | record ms | host total ms | host total p90 ms |",
        "|---|---|---|---|---|---|",
    ]
    for kind in kinds:
        totals = [sum(s[p] for p in PHASES) for s in samples[kind]]
        med = {p: statistics.median(s[p] for s in samples[kind]) for p in PHASES}
        p90 = statistics.quantiles(totals, n=10)[-1]
        lines.append(f"| {kind.name} | {med['schedule']:.3f} | {med['postprocess']:.3f} | {med['record']:.3f} "
                     f"| {statistics.median(totals):.3f} | {p90:.3f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.record:
        record(text, args.results)


if __name__ == "__main__":
    main()
