"""A shipped GPU profile, rebuilt from what was measured: the profile as `python -m runtime.profile` wrote it,
refitted (`runtime.refit_profile`) with the real steps that H200 runs logged.

    # conf/profiles/h200-llama-3-8b.json as shipped: the measured profile and every step the capacity replays
    # logged with every prefill chunk on flash, then a tier's cost from the real steps timed over two tiers
    H=experiments/results/h200-sim
    python -m experiments.refit_profile --profile $H/h200-llama-3-8b.measured.json --rows \
        $H/real-mooncake40-base-1.json $H/real-mooncake40-small-budget-few-seqs.json \
        $H/real-mooncake40-no-graphs-1.json $H/real-azure-base.json \
        $H/real-azure-small-budget-few-seqs-block-32-no-graphs.json $H/real-azure-tiers-1.json \
        --tier-rows $H/real-azure-tiers-2.json $H/real-mooncake40-tiers.json \
        $H/real-mooncake100-tiers-cut-{1,2}.json --out conf/profiles/h200-llama-3-8b.json

A rows file is `sim_accuracy.py --real-out` (rows per window) or `sim_capacity.py --real-out` (rows per
config). It prints the refit's error on held-back real steps, before and after. `--tier-rows` fits only
`tier_s` (`fit_tier_cost`, over the refitted coefficients) from its files' steps over several tiers, so those
files' one-tier steps stay out of the coefficients and the comparisons on them stay held out.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from runtime import GpuProfile, load_profile, refit_profile, save_profile
from runtime.sim.refit import tier_steps
from runtime.sim.stepmodel import fit_tier_cost


def logged_rows(path: Path) -> list[list]:
    data = json.loads(path.read_text(encoding="utf-8"))
    rows: list[list] = []
    for window in data["windows"].values():
        rows += window.get("rows", [])
        for run in window["configs"].values():
            rows += run.get("rows", [])
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", type=Path, required=True, help="the profile as measured")
    p.add_argument("--rows", type=Path, nargs="+", required=True, help="real runs' JSON with logged steps")
    p.add_argument("--tier-rows", type=Path, nargs="+", default=None,
                   help="real runs' JSON whose steps over several tiers fit tier_s (their one-tier steps unused)")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    rows = [r for path in a.rows for r in logged_rows(path)]
    refit = refit_profile(load_profile(a.profile), rows)
    print(f"{len(rows)} real steps from {', '.join(map(str, a.rows))}")
    print(f"measured profile on held-back real steps: {refit.before.line()}")
    print(f"refit on them: {refit.after.line()}")
    print(f"host time per step: {refit.host.line() if refit.host else 'not logged'}")
    profile = refit.profile if a.tier_rows is None else with_tier_cost(refit.profile, a.tier_rows)
    print(f"tier_s {profile.tier_s * 1e3:.2f} ms")
    print(f"wrote {save_profile(profile, a.out)}")
    return 0


def with_tier_cost(profile: GpuProfile, paths: list[Path]) -> GpuProfile:
    """`profile` with `tier_s` fitted from the steps over several tiers that `paths` logged, and a note saying so."""
    steps = tier_steps(r for path in paths for r in logged_rows(path))
    tier_s = fit_tier_cost(profile.step_model, steps)
    note = (f"tier_s {tier_s * 1e3:.2f} ms: a tier past the first, the mean over {len(steps)} real steps over "
            f"two tiers ({', '.join(path.name for path in paths)}) of what each took beyond the coefficients, "
            "hiccups left out")
    return replace(profile, tier_s=tier_s, notes=(*profile.notes, note))


if __name__ == "__main__":
    sys.exit(main())
