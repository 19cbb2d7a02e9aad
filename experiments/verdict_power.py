"""How often the verdict says "improved", on an executor whose truth is known (tuner/testing.py).

Each study is the real search, pruner, finalists, interval and verdict over a fake executor: every
replay's capacity is the config's true capacity times exp(N(0, noise)). A/A (better = 1.0: every config
equal) gives the false-positive rate; better = 1.2 (one knob value 20% better) gives the power.

    python -m experiments.verdict_power --studies 200 --noise 0.08 --better 1.0 1.2 --proof-rounds 4 6 8 [--record]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path

import optuna

from experiments.record import add_record_args, emit
from tuner.testing import FakeExecutor, run_fake_study


def rate(studies: int, noise: float, better: float, proof_rounds: int) -> tuple[int, int, float]:
    """(studies called improved, studies exporting the better config, replays per study)."""
    tmp = Path(tempfile.mkdtemp())
    improved = exported = replays = 0
    for seed in range(studies):
        executor = FakeExecutor(lambda c: 10.0 * (better if c.cache.block_size == 32 else 1.0), noise, seed)
        conclusion, _ = run_fake_study(tmp, executor, seed, proof_rounds=proof_rounds)
        improved += conclusion.verdict.improved
        exported += conclusion.verdict.improved and conclusion.exported.config.cache.block_size == 32
        replays += executor.replays
    return improved, exported, replays / studies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--studies", type=int, default=200)
    parser.add_argument("--noise", type=float, default=0.08)
    parser.add_argument("--better", type=float, nargs="+", default=[1.0, 1.2])
    parser.add_argument("--proof-rounds", type=int, nargs="+", default=[4, 6, 8])
    add_record_args(parser)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore")
    lines = ["| truth | proof rounds | called improved | better config exported | replays per study |",
             "|---|---|---|---|---|"]
    for better in args.better:
        for rounds in args.proof_rounds:
            start = time.time()
            improved, exported, replays = rate(args.studies, args.noise, better, rounds)
            truth = "A/A (all equal)" if better == 1.0 else f"one value {better - 1:+.0%}"
            lines.append(f"| {truth} | {rounds} | {improved}/{args.studies} | {exported}/{args.studies} | "
                         f"{replays:.0f} |")
            print(lines[-1], f"({time.time() - start:.0f} s)", flush=True)
    table = "\n".join(lines)
    emit(table, args, "The verdict on a known truth: false positives and power")


if __name__ == "__main__":
    main()
