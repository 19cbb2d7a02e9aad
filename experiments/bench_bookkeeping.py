"""Host cost of one decode step at 256 running sequences: scheduling and block bookkeeping, no model.

    python -m experiments.bench_bookkeeping [--seqs 256] [--prompt-len 512] [--steps 2000] [--record]
                                            [--profile] [--results experiments/RESULTS.md]

Builds a KVCacheManager + Scheduler as the engine does, admits `--seqs` prompts of about
`--prompt-len` random tokens (lengths spread over +-1/16 so block boundaries do not all fall on the
same step), runs the prefill steps, then times `--steps` decode steps. Per step:

    schedule()                          -> column "schedule"
    runtime.inputs.build_inputs on CPU tensors                               -> "build_inputs"
    the engine's postprocess bookkeeping: Scheduler.update_computed (computed tokens, kv.commit), the fork
      check, Scheduler.update_from_output (token append, timestamps, stop checks); kv.usage -> "bookkeeping"

The target (issue 2) is schedule + bookkeeping <= 1 ms per step. `--profile` prints cProfile's top
functions for the first configuration.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import os
import platform
import pstats
import random
import statistics
import time
from typing import NamedTuple

import torch

from experiments.record import add_record_args, command_line, record
from runtime.config import KernelConfig
from runtime.inputs import build_inputs
from runtime.kv.manager import KVCacheManager, TierSpec
from runtime.outputs import RequestMetrics
from runtime.sampling_params import SamplingParams
from runtime.scheduler import Scheduler, SchedulerOutput
from runtime.sequence import Request, Sequence

CONFIGS = [(16, True), (16, False), (32, True), (32, False)]  # (block size, prefix caching)
BUDGET = 8192  # max_num_batched_tokens: prefill in chunks, every decode fits
TARGET_MS = 1.0
CPU = torch.device("cpu")


class StepTimes(NamedTuple):
    schedule: list[float]  # seconds per decode step
    bookkeeping: list[float]
    inputs: list[float]


def build(num_seqs: int, prompt_len: int, steps: int, block_size: int, caching: bool) -> Scheduler:
    """A scheduler over one tier big enough that nothing is ever preempted; prompts added, none run."""
    rng = random.Random(0)
    max_tokens = steps + 100  # decodes also run during the ~20 prefill steps; nothing finishes while timed
    max_len = prompt_len + prompt_len // 16 + max_tokens
    num_blocks = num_seqs * -(-max_len // block_size)
    kv = KVCacheManager([TierSpec(max_len, block_size, num_blocks, 0)], enable_prefix_caching=caching,
                        watermark=0.01)
    sched = Scheduler(kv, max_num_seqs=num_seqs, max_num_batched_tokens=BUDGET, chunked_prefill=True,
                      preemption_mode="recompute")
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    for i in range(num_seqs):
        length = prompt_len + rng.randint(-prompt_len // 16, prompt_len // 16)
        prompt = [rng.randrange(3, 32000) for _ in range(length)]
        req = Request(f"r{i}", prompt, params, float(i), 0, RequestMetrics(float(i)))
        seq = Sequence(i, req, 0, list(prompt), 0, seed=i)
        req.seqs.append(seq)
        sched.add(seq)
    return sched


def postprocess(sched: Scheduler, out: SchedulerOutput, now: float, token: int = 5) -> None:
    """The engine's `_postprocess` and `_record` bookkeeping with the sampler replaced by a constant: the
    scheduler's `update_computed`, the fork check and the sampler's rows, `update_from_output`, `kv.usage`."""
    rows = []  # the sampler's per-row arguments
    sampling = sched.update_computed(out)
    for seq in sampling:
        # the engine's fork check, evaluated for the same cost; this benchmark's requests all have n = 1
        assert not (seq.request.params.n > len(seq.request.seqs) and seq.num_output_tokens == 0)
        rows.append((seq.seq_id, seq.seed, seq.request.params))
    sched.update_from_output([(seq, token) for seq in sampling], now, _no_text)
    sched.kv.usage(sched.running)


def _no_text(seq: Sequence) -> bool:
    return False  # no request here has stop strings: never asked


def run(sched: Scheduler, steps: int, kernel: KernelConfig) -> StepTimes:
    while any(not s.is_decode for s in sched.running) or sched.waiting:  # prefill, untimed
        postprocess(sched, sched.schedule(), 0.0)
    times = StepTimes([], [], [])
    clock = time.perf_counter
    for _ in range(steps):
        t0 = clock()
        out = sched.schedule()
        t1 = clock()
        build_inputs(out.scheduled, sched.kv, kernel, False, CPU)  # the runner's work, before postprocess
        t2 = clock()
        postprocess(sched, out, t2)
        t3 = clock()
        assert out.num_batched_tokens == len(sched.running)  # every sequence decodes every step
        times.schedule.append(t1 - t0)
        times.inputs.append(t2 - t1)
        times.bookkeeping.append(t3 - t2)
    return times


def _ms(xs: list[float], q: float) -> float:
    return 1e3 * (statistics.median(xs) if q == 0.5 else statistics.quantiles(xs, n=100)[int(q * 100) - 1])


def row(block_size: int, caching: bool, t: StepTimes) -> str:
    total = [a + b for a, b in zip(t.schedule, t.bookkeeping)]
    ok = "yes" if _ms(total, 0.5) <= TARGET_MS else "no"
    cells = [f"{block_size}", "on" if caching else "off", f"{_ms(total, 0.5):.3f}", f"{_ms(total, 0.99):.3f}",
             f"{_ms(t.schedule, 0.5):.3f}", f"{_ms(t.bookkeeping, 0.5):.3f}", f"{_ms(t.inputs, 0.5):.3f}",
             f"{_ms(t.inputs, 0.99):.3f}", ok]
    return "| " + " | ".join(cells) + " |"


def header(args: argparse.Namespace) -> str:
    return (
        "## Scheduling and block bookkeeping per decode step (CPU, no model)\n\n"
        f"{datetime.date.today().isoformat()}, {platform.platform()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs (shared with other jobs), Python {platform.python_version()}, "
        f"torch {torch.__version__}. {args.seqs} running sequences, prompts of {args.prompt_len} +- "
        f"{args.prompt_len // 16} tokens, {args.steps} timed decode steps, max_num_batched_tokens {BUDGET}.\n"
        f"Command: `{command_line()}`\n\n"
        "| block size | prefix caching | schedule + bookkeeping median (ms) | p99 (ms) | schedule() median (ms) "
        "| bookkeeping median (ms) | build_inputs median (ms) | build_inputs p99 (ms) | <= 1 ms |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seqs", type=int, default=256)
    parser.add_argument("--prompt-len", type=int, default=512)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--profile", action="store_true", help="cProfile the first configuration's decode steps")
    add_record_args(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    kernel = KernelConfig()
    rows = []
    for i, (block_size, caching) in enumerate(CONFIGS):
        sched = build(args.seqs, args.prompt_len, args.steps, block_size, caching)
        if args.profile and i == 0:
            profiler = cProfile.Profile()
            times = profiler.runcall(run, sched, args.steps, kernel)
            pstats.Stats(profiler).sort_stats("tottime").print_stats(18)
        else:
            times = run(sched, args.steps, kernel)
        rows.append(row(block_size, caching, times))
        print(rows[-1], flush=True)
    text = header(args) + "\n".join(rows) + "\n"
    print("\n" + text)
    if args.record:
        record(text, args.results)


if __name__ == "__main__":
    main()
