"""`python -m tests.tuner.executors.fan_check PROFILE`: one simulated trial with its probes side by side in forked
processes, the same with the batches run here, and one probe at a time; prints the three compared (a fresh
interpreter, as the tuner's parent: no torch, so it may fork)."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.tuner.executors.test_sim_executor import _job, _run
from tuner.executors import sim
from tuner.executors.parallel import probe_fan
from tuner.executors.sim import SimExecutor
from tuner.measure.measure import Fan


def main(profile: str) -> None:
    executor = SimExecutor(Path(profile))
    sim.FAN_MIN_REQUESTS = 0  # the test window (60 requests) side by side
    forked = _run(executor, _job(max_num_seqs=1)).measurement
    width = probe_fan(lambda: None).width
    here = Fan(width, lambda task, count: [task(i) for i in range(count)])
    executor._fan = lambda requests: here  # the same batches, run in this process
    batched = _run(executor, _job(max_num_seqs=1)).measurement
    sim.FAN_MIN_REQUESTS = 10**9
    del executor._fan
    one = _run(executor, _job(max_num_seqs=1)).measurement
    print(f"width {width}")
    print(f"forked equal {[p.scale for p in forked.probes] == [p.scale for p in batched.probes]} "
          f"{forked.values == batched.values} {forked.metrics == batched.metrics}")
    print(f"probes {len(forked.probes)} {len(one.probes)}")
    print(f"capacity {forked.values[0]:.6g} {forked.metrics['capacity_upper_scale']:.6g} {one.values[0]:.6g} "
          f"{one.metrics['capacity_upper_scale']:.6g}")


if __name__ == "__main__":
    main(sys.argv[1])
