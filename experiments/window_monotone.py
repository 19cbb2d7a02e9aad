"""Is a window's pass/fail monotone in the rate? The simulated verdict of each config at 1% steps from 0.8x to
1.15x its simulated capacity, for windows of several sizes from one start (CPU, the shipped profile):

    python -m experiments.window_monotone --profile conf/profiles/h200-llama-3-8b.json --requests 40,60,80,100

At attainment 0.99 none of fewer than 100 requests may miss: a probe then fails on its one slowest request, and
whether that request misses can turn on where the arrivals fall against the long prefill chunks, so the verdict
flips back and forth with the rate. A bisection then reports whichever edge its path meets. Per config: the
bisection's capacity, the last scale before the first failure counting up from 0.8x, how often the verdict
changes over the steps, and the verdicts (P pass, F fail).
"""

from __future__ import annotations

import argparse
import itertools
import sys

import numpy as np

from experiments.capacity_sim import CPU_REQUESTS, ORDER, sim_capacity, sim_passes, slo_for
from experiments.sim_lab import configs, engine_config
from experiments.windows import CAPACITY_WINDOWS, rate_rps, window_requests
from runtime import load_profile


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", default="conf/profiles/h200-llama-3-8b.json")
    p.add_argument("--window", default="mooncake", help="a window of windows.CAPACITY_WINDOWS: its trace and start")
    p.add_argument("--requests", default="40,100", help="comma-separated window sizes")
    a = p.parse_args()
    profile, window, every, slo = load_profile(a.profile), CAPACITY_WINDOWS[a.window], configs(False), slo_for(False)
    steps = int(np.log(1.15 / 0.8) / np.log(1.01)) + 1
    for n in map(int, a.requests.split(",")):
        requests = window_requests(window._replace(requests=n), profile, False, CPU_REQUESTS)
        print(f"{n} requests of {window.trace} from {window.start_s:g} s ({rate_rps(requests):.3f} req/s at x1)")
        for cfg in ORDER:
            config = engine_config(profile, every[cfg], False)
            capacity = sim_capacity(config, profile, requests, slo).values[0]
            scales = [capacity * 0.8 * 1.01**k for k in range(steps)]
            verdicts = "".join("P" if sim_passes(config, profile, requests, slo, x) else "F" for x in scales)
            flips = sum(x != y for x, y in itertools.pairwise(verdicts))
            first = verdicts.find("F")
            below = scales[first - 1] if first > 0 else float("nan")
            print(f"  {cfg}: bisection x{capacity:.3f}, first failure from below after x{below:.3f} "
                  f"({below / capacity - 1:+.0%}), {flips} flips  {verdicts}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
