"""How much one capacity measurement varies: the same config measured N times by the real worker.

Each measurement is what a re-measurement round does (one replay per probe, a start dithered near the
first estimate, bisection to `--tol`); the spread between them is the noise the verdict's interval must
absorb (tuner/testing.py models it as lognormal noise per replay).

    python -m experiments.capacity_noise --measurements 12 --ttft 0.3 --tpot 0.02 [--record]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from experiments.record import add_record_args, emit
from runtime import EngineConfig
from tuner.config import ObjectiveName, SloConfig
from tuner.executors.supervisor import WorkerSupervisor
from tuner.measure.job import MeasurePlan, TrialJob
from tuner.traffic import SAMPLE_TRAFFIC, arrival_rate, load_traffic, select, split_windows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--measurements", type=int, default=12)
    parser.add_argument("--ttft", type=float, default=0.3)
    parser.add_argument("--tpot", type=float, default=0.02)
    parser.add_argument("--tol", type=float, default=0.05)
    add_record_args(parser)
    args = parser.parse_args()
    traffic = load_traffic(SAMPLE_TRAFFIC, vocab_size=2048, max_model_len=4096)
    requests = split_windows(select(traffic.requests), 0.2).search
    rate, slo = arrival_rate(requests), SloConfig(ttft_s=args.ttft, tpot_s=args.tpot)
    config = EngineConfig.from_flat("tiny", device="cpu")
    supervisor, rng = WorkerSupervisor(cpu_threads=1), random.Random(0)
    capacities: list[float] = []
    start = time.time()
    try:
        for i in range(args.measurements):
            first = capacities[0] / rate if capacities else 1.0
            scale = first * (1 + args.tol) ** rng.uniform(-1, 1) if capacities else 1.0
            plan = MeasurePlan(ObjectiveName.capacity, slo, 1, scale, 2.0 if not capacities else 1 + 4 * args.tol,
                               args.tol, False, 32)
            outcome = supervisor.run(TrialJob(i, config, None, "s", plan), requests, lambda *a: None,
                                     lambda p: True, 600.0)
            capacities.append(outcome.measurement.values[0] * rate)
    finally:
        supervisor.close()
    later = capacities[1:]  # the first one brackets from scratch; the others start near it, like re-measurements
    cv = statistics.stdev(later) / statistics.mean(later)
    table = "\n".join([
        "| measurements | capacity req/s, in order | median | CV (all but the first) | wall s |",
        "|---|---|---|---|---|",
        f"| {len(capacities)} | {' '.join(f'{c:.1f}' for c in capacities)} | {statistics.median(later):.1f} | "
        f"{cv:.1%} | {time.time() - start:.0f} |"])
    emit(table, args, "One config's capacity measured repeatedly")


if __name__ == "__main__":
    main()
