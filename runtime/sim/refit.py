"""A GPU profile refitted with a real engine's timed steps (no torch).

The real steps are split as the profile command splits its own (every fifth held back per variant); the
profile's model and the refit are both judged on the held-back real steps, and the refit (the profile's
steps and every real step) is what the new profile ships.

    row: (variant key, prefill_tokens, prefill_attention, decode_seqs, decode_context, seconds)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import NamedTuple

from runtime.sim.profile_file import GpuProfile, samples_table
from runtime.sim.stepmodel import FitError, StepSample, StepShape, Variant, fit, fit_error, split_held_back

StepRow = tuple[str, int, int, int, int, float]


class Refit(NamedTuple):
    profile: GpuProfile  # the refitted profile (coefficients, steps, held-back error)
    before: FitError  # the original profile's error on the held-back real steps
    after: FitError  # the refit's error on them (fitted without them)
    steps: int  # real steps used


def step_samples(rows: Iterable[StepRow]) -> list[StepSample]:
    return [StepSample(Variant.parse(key), StepShape(int(pt), int(pa), int(ds), int(dc)), float(s))
            for key, pt, pa, ds, dc, s in rows if s > 0]


def refit_profile(profile: GpuProfile, rows: Iterable[StepRow]) -> Refit:
    real = step_samples(rows)
    fit_points, held = split_held_back(real)
    before = fit_error(profile.step_model, held)
    after = fit_error(fit([*profile.step_samples, *fit_points]), held)
    every = [*profile.step_samples, *real]
    refitted = replace(profile, coefficients=dict(fit(every).coefficients), samples=samples_table(every),
                       held_back_error=tuple(after),
                       notes=(*profile.notes, f"refitted with {len(real)} steps timed on the real engine; "
                              f"held-back error before {before.line()}, after {after.line()}"))
    return Refit(refitted, before, after, len(real))
