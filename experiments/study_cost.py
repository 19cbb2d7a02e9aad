"""How long a study's conclusion would replay on a GPU: its kept measurements (the simulated run of the same
command) read back, each passing replay timed as its window's arrivals at the probe's rate, each failing one
as a share of that (a replay that fails stops at its first decisive miss). Sizes a `sim+real` or real study
before device time is spent on it.

    python -m tuner +traffic=T executor=sim ... tuner.study_name=S storage.url=sqlite:///S.db   # simulated
    python -m experiments.study_cost --storage sqlite:///S.db --study S --search 400 --held 300

The window sizes are the counts of the tuner's `windows:` line. Estimates, not measurements: a real replay
also drains its last requests, and a fail stops wherever its misses come.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import optuna

from tuner.results.kept import KeptMeasurements


def replay_s(passed: bool, scale_rps: float, requests: int, fail_share: float) -> float:
    """A replay's wall time: its window's arrivals at `scale_rps` (req/s), a share of that when it failed."""
    whole = (requests - 1) / scale_rps
    return whole if passed else fail_share * whole


def measurement_s(probes: Sequence[Sequence], requests: int, fail_share: float) -> float:
    """The replays of one kept measurement: [scale_rps, passed, [attainment per replay]] per probe."""
    return sum(replay_s(passed, scale, requests, fail_share) for scale, passed, replays in probes for _ in replays)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--storage", required=True)
    parser.add_argument("--study", required=True)
    parser.add_argument("--search", type=int, required=True, help="requests in the search window")
    parser.add_argument("--held", type=int, required=True, help="requests in the held-out window")
    parser.add_argument("--fail-share", type=float, default=0.3, help="a failing replay's share of a whole one")
    parser.add_argument("--start-s", type=float, default=30.0, help="engine start and warm-up a measurement")
    args = parser.parse_args(argv)
    study = optuna.load_study(study_name=args.study, storage=args.storage)
    sizes = {"search": args.search, "validation": args.held}
    total = 0.0
    for key, record in KeptMeasurements(study).records():
        seconds = measurement_s(record["probes"], sizes[key.split("/")[0]], args.fail_share) + args.start_s
        passes = sum(1 for _, passed, replays in record["probes"] if passed for _ in replays)
        print(f"{key:<22} {record['value']:8.3f} req/s  {len(record['probes'])} probes "
              f"({passes} passing replays)  ~{seconds:5.0f} s")
        total += seconds
    print(f"conclusion: ~{total:.0f} s ({total / 60:.1f} min) of replays and starts")


if __name__ == "__main__":
    main()
