"""Where one `LLM.generate` run spends its time, step by step: host work against GPU work.

Runs a bench_e2e workload once per configuration and splits every engine step into
    schedule      Scheduler.schedule()
    execute       ModelRunner.execute(): building inputs and launching the forward (eager: Python
                  launch time of every kernel; CUDA graphs: staging and one replay)
    sample        Sampler.sample(): argmax and .tolist(), which waits for the GPU to finish
    rest          postprocess bookkeeping, outputs, step stats
grouped by step kind (pure decode on a CUDA graph, pure decode eager, steps with prefill).
A step's GPU time hides behind `execute` + `sample`; the host-only share is schedule + rest.

    python -m experiments.profile_e2e [--workload mixed] [--budgets 8192,16384] [--record]
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from typing import Any

import torch

from experiments.bench_e2e import free_device, timed_generate, warmed_llm, workload
from experiments.record import add_record_args, header, record
from experiments.timing import time_phase
from runtime import LLM
from runtime.model.presets import preset_config

PHASES = ("schedule", "execute", "sample")


class StepClock:
    """Wraps the engine's phases with wall-clock timers; one record per step."""

    def __init__(self, llm: LLM) -> None:
        engine = llm.engine
        self.spent: dict[str, float] = {}
        self.steps: list[tuple[str, int, dict[str, float], float]] = []  # kind, tokens, phases, total
        for obj, name in ((engine.scheduler, "schedule"), (engine.runner, "execute"), (engine.sampler, "sample")):
            time_phase(obj, name, self.spent, name)
        inner_step, runner = engine.step, engine.runner

        def step():
            self.spent.update(dict.fromkeys(PHASES, 0.0))
            start = time.perf_counter()
            out = inner_step()
            total = time.perf_counter() - start
            self.steps.append((self.kind, self.tokens, dict(self.spent), total))
            return out

        def kind_of(sched) -> str:
            self.tokens = sched.num_batched_tokens
            decode = all(s.num_new_tokens == 1 for s in sched.scheduled)
            if not sched.scheduled:
                return "idle"
            if decode and runner.graphs is not None and runner.graphs.can_run(sched.scheduled):
                return "decode (graph)"
            return "decode (eager)" if decode else "with prefill"

        inner_execute = runner.execute

        def execute(sched):
            self.kind = kind_of(sched)
            return inner_execute(sched)

        runner.execute = execute
        engine.step = step
        self.kind, self.tokens = "idle", 0

    def table(self) -> list[dict[str, Any]]:
        groups: dict[str, list] = defaultdict(list)
        for kind, tokens, spent, total in self.steps:
            groups[kind].append((tokens, spent, total))
        rows = []
        for kind, items in sorted(groups.items()):
            n = len(items)
            total = sum(t for _, _, t in items)
            phase = {p: sum(s[p] for _, s, _ in items) for p in PHASES}
            rest = total - sum(phase.values())
            rows.append({"kind": kind, "steps": n, "tokens": sum(t for t, _, _ in items), "seconds": total,
                         **{f"{p}_ms": 1e3 * v / n for p, v in phase.items()}, "rest_ms": 1e3 * rest / n,
                         "step_ms": 1e3 * total / n})
        return rows


def profile(model: str, prompts, outs, **knobs: Any) -> tuple[float, int, list[dict[str, Any]]]:
    llm = warmed_llm(model, prompts, **knobs)
    clock = StepClock(llm)
    seconds, tokens = timed_generate(llm, prompts, outs)
    rows = clock.table()
    del llm, clock  # the clock's wrappers hold the engine: drop both before the next model
    free_device()
    return seconds, tokens, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="llama-3-8b")
    parser.add_argument("--workload", default="mixed")
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--budgets", default="8192", help="max_num_batched_tokens values to profile")
    parser.add_argument("--eager", action="store_true", help="also profile without CUDA graphs")
    add_record_args(parser)
    args = parser.parse_args()
    prompts, outs = workload(args.workload, args.requests, preset_config(args.model).vocab_size)
    lines = ["| max_num_batched_tokens | CUDA graphs | tok/s | step kind | steps | tokens | seconds | schedule ms | "
             "execute ms | sample (incl. GPU wait) ms | rest ms | step ms |", "|---" * 12 + "|"]
    for budget in (int(b) for b in args.budgets.split(",")):
        modes = (True, False) if args.eager else (True,)
        for graphs in modes if torch.cuda.is_available() else (False,):
            knobs = dict(max_num_seqs=256, max_num_batched_tokens=budget, max_model_len=4096,
                         gpu_memory_utilization=0.9, cuda_graphs=graphs)
            seconds, tokens, rows = profile(args.model, prompts, outs, **knobs)
            for r in rows:
                lines.append(f"| {budget} | {graphs} | {tokens / seconds:,.0f} | {r['kind']} | {r['steps']} | "
                             f"{r['tokens']:,} | {r['seconds']:.2f} | {r['schedule_ms']:.2f} | {r['execute_ms']:.2f}"
                             f" | {r['sample_ms']:.2f} | {r['rest_ms']:.2f} | {r['step_ms']:.2f} |")
            print("\n".join(lines[-len(rows):]), flush=True)
    table = "\n".join(lines)
    print(table)
    if args.record:
        record(header(f"Step-time profile of LLM.generate ({args.model} shape, {args.workload}, "
                      f"{args.requests} requests)") + "\n" + table + "\n", args.results)


if __name__ == "__main__":
    main()
