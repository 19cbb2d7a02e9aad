"""The first-replay penalty, with and without the warm-up: each setting in a fresh worker process.

A fresh worker replays the same window N times through one engine (the trial path: `tuner.executors.run`);
the table gives each replay's busy time and the first one against the median of the others. Without
the warm-up the first replay pays for kernel compilation and first-call setup; with it (the first
requests replayed at once and discarded) it should not.

    python -m experiments.warmup_penalty --model tiny --requests 96 --repeats 6 [--record]
"""

from __future__ import annotations

import argparse
import statistics

from experiments.record import add_record_args, emit
from runtime import EngineConfig
from tuner.config import ObjectiveName, SloConfig
from tuner.executors.supervisor import WorkerSupervisor
from tuner.measure.job import MeasurePlan, TrialJob
from tuner.traffic import SAMPLE_TRAFFIC, load_traffic, select


def busy_times(config: EngineConfig, requests, repeats: int, warmup: int) -> list[float]:
    """Busy seconds of each replay, in a worker process started for this measurement alone."""
    plan = MeasurePlan(ObjectiveName.goodput, SloConfig(), repeats, warmup_requests=warmup)
    supervisor = WorkerSupervisor(cpu_threads=1)
    try:
        outcome = supervisor.run(TrialJob(0, config, None, "w", plan), requests, lambda *a: None, lambda p: True,
                                 1800.0)
    finally:
        supervisor.close()
    if outcome.measurement is None:
        raise RuntimeError(f"{outcome.status.value}: {outcome.reason}")
    return [r.metrics["busy_s"] for r in outcome.measurement.probes[0].replays]


def penalty(times: list[float]) -> float:
    return times[0] / statistics.median(times[1:]) - 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--traffic", default=str(SAMPLE_TRAFFIC))
    parser.add_argument("--requests", type=int, default=96)
    parser.add_argument("--time-scale", type=float, default=8.0)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=32)
    parser.add_argument("--max-model-len", type=int, default=4096)
    add_record_args(parser)
    args = parser.parse_args()
    config = EngineConfig.from_flat(args.model, max_model_len=args.max_model_len)
    traffic = load_traffic(args.traffic, vocab_size=128256 if args.model != "tiny" else 2048,
                           max_model_len=args.max_model_len, long_prompts="truncate")
    requests = select(traffic.requests, max_requests=args.requests, time_scale=args.time_scale)
    lines = ["| warm-up | busy s per replay (fresh worker, in order) | first / median of the rest - 1 |",
             "|---|---|---|"]
    for warmup in (0, args.warmup):
        times = busy_times(config, requests, args.repeats, warmup)
        shown = " ".join(f"{t:.3f}" for t in times)
        lines.append(f"| {warmup or 'none'} | {shown} | {penalty(times):+.1%} |")
    table = "\n".join(lines)
    emit(table, args, "The first-replay penalty, with and without the warm-up")


if __name__ == "__main__":
    main()
