"""`python -m tests.tuner.results.rounds_check PROFILE`: simulated rounds re-measured with the workers the
executor allows, then one at a time; prints both compared (a fresh interpreter, as the tuner's parent: no torch)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from runtime import EngineConfig
from tuner.config import SloConfig
from tuner.executors.parallel import measurement_workers
from tuner.executors.sim import SimExecutor
from tuner.results import finalists
from tuner.results.finalists import Candidate, remeasure
from tuner.testing import fake_app
from tuner.traffic import SAMPLE_TRAFFIC, ReplayWindow, arrival_rate, load_traffic, select


def _candidate(label: str, trial: int, max_num_seqs: int) -> Candidate:
    config = EngineConfig.from_mapping({"model": {"name": "tiny"}, "cache": {"device_memory_gb": 0.05},
                                        "scheduler": {"max_model_len": 1024, "max_num_seqs": max_num_seqs}})
    return Candidate(label, trial, config, 2.0, {"max_num_seqs": max_num_seqs})


def main(profile: str) -> None:
    executor = SimExecutor(Path(profile))
    app = dataclasses.replace(fake_app(select_rounds=2), slo=SloConfig(ttft_s=0.3, tpot_s=0.02))
    requests = select(load_traffic(SAMPLE_TRAFFIC, vocab_size=2048, max_model_len=1024).requests, max_requests=40)
    window = ReplayWindow("search", requests, arrival_rate(requests))
    candidates = [_candidate("baseline", 0, 8), _candidate("trial 3", 3, 2)]
    ticks: list[int] = []
    print(f"workers {min(2, measurement_workers(executor, 4))}")
    side_by_side = remeasure(executor, app.measuring, candidates, window, 2, lambda: ticks.append(1))
    finalists.measurement_workers = lambda executor, tasks: 1  # the same rounds, one at a time
    one_at_a_time = remeasure(executor, app.measuring, candidates, window, 2)
    print(f"ticks {len(ticks)}")
    print(f"equal {side_by_side == one_at_a_time}")
    print("values", *side_by_side.values.values())


if __name__ == "__main__":
    main(sys.argv[1])
