"""`tuner.fidelity=sim+real`: the simulated figures beside the measured ones, and the profile refitted.

The search ran on the simulator; the finalists and the baseline were then measured on the real runtime
(the selection rounds). Each candidate's simulated value (its trial's) is set beside its measured median
with the simulation's error; the real engine's timed steps of those measurements refit the GPU profile
(`runtime.refit_profile`), written beside best.yaml as `profile-refit.json`.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from runtime import refit_profile, save_profile
from tuner.results.conclude import Conclusion
from tuner.trials.sim import SimExecutor

__all__ = ["Fidelity", "fidelity"]


class Fidelity(NamedTuple):
    lines: list[str]  # for the report's "Simulated and measured" section and the console
    refit_path: Path | None  # the refitted profile, when real steps were timed


def fidelity(c: Conclusion, sim: SimExecutor, out_dir: Path) -> Fidelity:
    lines = []
    for cand in [c.baseline, *c.finalists]:
        measured = c.selection.median(cand.label)
        if measured is None:
            lines.append(f"{cand.label}: simulated {cand.search_value:.4g} {c.unit}, not measured")
            continue
        error = (cand.search_value - measured) / measured if measured else float("nan")
        lines.append(f"{cand.label}: simulated {cand.search_value:.4g} {c.unit}, measured {measured:.4g} {c.unit} "
                     f"(simulation error {error:+.1%})")
    rows = [*c.selection.steps, *c.proof.steps]
    if not rows:
        return Fidelity([*lines, "no real step was timed: the profile is not refitted"], None)
    refit = refit_profile(sim.profile, rows)
    path = save_profile(refit.profile, out_dir / "profile-refit.json")
    lines += [f"step times of {sim.path.name} on {refit.steps} real steps: {refit.before.line()}",
              f"refitted with them ({path.name}): {refit.after.line()}"]
    if refit.tier_steps:
        lines.append(f"a tier past the first: {refit.profile.tier_s * 1e3:.2f} ms a step "
                     f"(from {refit.tier_steps} real steps over several tiers)")
    return Fidelity(lines, path)
