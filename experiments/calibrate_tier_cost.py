"""The cost of a tier past the first (`StepTimeModel.tier_s`), calibrated on a real capacity search of a tiered
config when its steps over several tiers were not logged (step logs before 2026-12-02 kept one-tier steps only).

At the real capacity, the window is simulated whole with each candidate `tier_s`; the one whose median TPOT
comes nearest the real replays' median is kept. A refit from logged steps over several tiers
(`runtime.refit_profile`) supersedes it.

    python experiments/calibrate_tier_cost.py --profile conf/profiles/h200-llama-3-8b.json --window azure \\
        --real-in experiments/results/h200-sim/capacity8-azure-2.json [--out conf/profiles/h200-llama-3-8b.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from capacity_sim import WINDOWS, sim_point, window_requests
from sim_accuracy import configs, engine_config

from runtime import save_profile
from runtime.sim import load_profile

CANDIDATES_MS = tuple(range(0, 21))  # 0, 1, ..., 20 ms a tier


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", type=Path, required=True)
    p.add_argument("--window", choices=sorted(WINDOWS), required=True)
    p.add_argument("--config", default="tiers", help="a tiered config of sim_accuracy.configs")
    p.add_argument("--real-in", type=Path, required=True, help="sim_capacity.py --real-out with that config")
    p.add_argument("--out", type=Path, default=None, help="write the profile with the calibrated tier_s here")
    a = p.parse_args()
    profile = load_profile(a.profile)
    run = json.loads(a.real_in.read_text(encoding="utf-8"))["windows"][a.window]["configs"][a.config]
    scale, real = run["capacity"], statistics.median(m["tpot_p50_s"] for m in run["point"])
    requests = window_requests(WINDOWS[a.window], profile, False)
    config = engine_config(profile, configs(False)[a.config], False)
    print(f"{a.window} {a.config} at its real capacity x{scale:.3f}: real TPOT p50 {real:.4f} s (median of "
          f"{len(run['point'])} replays)\n\n| tier_s ms | simulated TPOT p50 s | error |\n|---|---|---|")
    errors = {}
    for ms in CANDIDATES_MS:
        sim = sim_point(config, replace(profile, tier_s=ms / 1e3), requests, scale)["tpot_p50_s"]
        errors[ms] = (sim - real) / real
        print(f"| {ms} | {sim:.4f} | {errors[ms]:+.1%} |")
    best = min(errors, key=lambda ms: abs(errors[ms]))
    print(f"\nkept: {best} ms a tier ({errors[best]:+.1%})")
    if a.out:
        note = (f"tier_s {best} ms: calibrated on the real TPOT p50 of {a.window} {a.config} at x{scale:.3f} "
                f"({a.real_in.name}; experiments/calibrate_tier_cost.py), not from timed steps")
        save_profile(replace(profile, tier_s=best / 1e3, notes=(*profile.notes, note)), a.out)
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
