"""`tuner.fidelity=sim+real`: the simulated figures beside the measured ones, and the profile refitted.

The search ran on the simulator; the finalists and the baseline were then measured on the real runtime, their
searches started below the fastest rate each window can show, never at the simulated value. Accuracy is quoted
out of sample first: the pick and the baseline simulated on the held-out window, which no trial replayed,
beside their measured proof medians. Then, labelled in sample, each candidate's simulated search value beside
its measured selection median (the simulation chose these configs on that window). The real engine's timed
steps refit the GPU profile (`runtime.refit_profile`), written beside best.yaml as `profile-refit.json`: its
error before the refit is out of sample, after it in sample.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from runtime import refit_profile, save_profile
from tuner.config import Measuring
from tuner.executors.sim import SimExecutor
from tuner.results.conclude import Conclusion
from tuner.results.finalists import measure_once
from tuner.traffic import ReplayWindow

__all__ = ["Fidelity", "fidelity"]


class Fidelity(NamedTuple):
    lines: list[str]  # for the report's "Simulated and measured" section and the console
    refit_path: Path | None  # the refitted profile, when real steps were timed


def fidelity(c: Conclusion, sim: SimExecutor, out_dir: Path, measuring: Measuring,
             held_out: ReplayWindow | None) -> Fidelity:
    """Simulated against measured, in two labelled parts: out of sample first (the held-out window, which no
    trial replayed and no step of this study refitted: the accuracy to quote), then in sample (the search
    window, whose simulated values chose the configs); then the profile refitted with the real steps."""
    lines = []
    if held_out is not None:
        lines.append("held-out window, out of sample (no trial replayed it; simulated now, started at its own rate):")
        for cand in [c.pick, c.baseline] if c.pick is not c.baseline else [c.baseline]:
            done, _ = measure_once(sim, measuring, cand, held_out, 0, [], independent=True)
            lines.append(_compare(cand.label, None if done is None else done.value, c.proof.median(cand.label),
                                  c.unit))
    lines.append("search window, in sample (the simulated values that chose the configs):")
    lines += [_compare(cand.label, cand.search_value, c.selection.median(cand.label), c.unit)
              for cand in [c.baseline, *c.finalists]]
    rows = [*c.selection.steps, *c.proof.steps]
    if not rows:
        return Fidelity([*lines, "no real step was timed: the profile is not refitted"], None)
    refit = refit_profile(sim.profile, rows)
    path = save_profile(refit.profile, out_dir / "profile-refit.json")
    lines += [f"step times of {sim.path.name} on {refit.steps} real steps (out of sample): {refit.before.line()}",
              f"refitted with them ({path.name}; in sample from now on: quote it on other traces): "
              f"{refit.after.line()}"]
    if refit.tier_steps:
        lines.append(f"a tier past the first: {refit.profile.tier_s * 1e3:.2f} ms a step "
                     f"(from {refit.tier_steps} real steps over several tiers)")
    return Fidelity(lines, path)


def _compare(label: str, simulated: float | None, measured: float | None, unit: str) -> str:
    if simulated is None:
        return f"  {label}: not simulated (its simulation failed), measured {_figure(measured, unit)}"
    if measured is None:
        return f"  {label}: simulated {simulated:.4g} {unit}, not measured"
    error = (simulated - measured) / measured if measured else float("nan")
    return (f"  {label}: simulated {simulated:.4g} {unit}, measured {measured:.4g} {unit} "
            f"(simulation error {error:+.1%})")


def _figure(value: float | None, unit: str) -> str:
    return "-" if value is None else f"{value:.4g} {unit}"
