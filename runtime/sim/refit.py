"""A GPU profile refitted with a real engine's timed steps (no torch).

The real steps are split as the profile command splits its own (every fifth held back per variant); the
profile's model and the refit are both judged on the held-back real steps, and the refit (the profile's
steps and every real step) is what the new profile ships. Rows that carry their host time (the step log
measures it) also fit the profile's host model (`runtime.sim.hostmodel`) on all of them. Rows of steps
over several tiers fit the cost of a tier past the first (`stepmodel.fit_tier_cost`) against the refit;
the per-variant fit reads one-tier rows only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import NamedTuple

from runtime.sim.hostmodel import HostModel, fit_host
from runtime.sim.profile_file import GpuProfile, samples_table
from runtime.sim.stepmodel import (
    FitError,
    StepSample,
    StepShape,
    Variant,
    fit,
    fit_error,
    fit_tier_cost,
    split_held_back,
)


class StepRow(NamedTuple):
    """One step of a real engine, as `runtime.step_log` logs it."""

    variant: str  # stepmodel.Variant.key
    prefill_tokens: int
    prefill_attention: int
    decode_seqs: int
    decode_context: int
    seconds: float  # the forward and sampling: what the step-time model predicts
    seqs: int | None = None  # sequences the step scheduled
    host_s: float | None = None  # the rest of the step and the replay loop's gap before it: the host model's
    others: tuple = ()  # a step over several tiers: (variant key, the four shape fields) of each tier past the
    #                     first (the fields above are the first tier's)


class Refit(NamedTuple):
    profile: GpuProfile  # the refitted profile (coefficients, steps, held-back error, host model, tier cost)
    before: FitError  # the original profile's error on the held-back real steps
    after: FitError  # the refit's error on them (fitted without them)
    steps: int  # real one-tier steps used
    host: HostModel | None = None  # fitted from the rows' host times; None when no row carried one
    tier_steps: int = 0  # real steps over several tiers, which fitted the profile's tier_s (none: kept)


def step_samples(rows: Iterable[Sequence]) -> list[StepSample]:
    """The one-tier rows as the per-variant fit takes them."""
    return [StepSample(Variant.parse(r.variant), _shape(r[1:5]), float(r.seconds))
            for r in map(_row, rows) if r.seconds > 0 and not r.others]


def tier_steps(rows: Iterable[Sequence]) -> list[tuple[list[tuple[Variant, StepShape]], float]]:
    """The rows of steps over several tiers: (variant and shape per tier, seconds)."""
    return [([(Variant.parse(r.variant), _shape(r[1:5])),
              *((Variant.parse(o[0]), _shape(o[1:5])) for o in r.others)], float(r.seconds))
            for r in map(_row, rows) if r.seconds > 0 and r.others]


def _shape(fields: Sequence) -> StepShape:
    return StepShape(*(int(v) for v in fields))


def host_points(rows: Iterable[Sequence]) -> list[tuple[int, float]]:
    return [(r.seqs, r.host_s) for r in map(_row, rows) if r.seqs is not None and r.host_s is not None]


def _row(row: Sequence) -> StepRow:
    return row if isinstance(row, StepRow) else StepRow(*row)  # a tuple from a worker's pickled or JSON result


def refit_profile(profile: GpuProfile, rows: Iterable[Sequence]) -> Refit:
    rows = [_row(r) for r in rows]  # once: every fit reads them
    real = step_samples(rows)
    fit_points, held = split_held_back(real)
    before = fit_error(profile.step_model, held)
    after = fit_error(fit([*profile.step_samples, *fit_points]), held)
    every = [*profile.step_samples, *real]
    model = fit(every)
    tiered = tier_steps(rows)
    tier_s = fit_tier_cost(model, tiered) if tiered else profile.tier_s
    points = host_points(rows)
    host = fit_host(points) if points else None
    note = (f"refitted with {len(real)} steps timed on the real engine; "
            f"held-back error before {before.line()}, after {after.line()}")
    if host is not None:
        note += f"; host time per step {host.line()} (from {len(points)} steps)"
    if tiered:
        note += f"; {tier_s * 1e3:.2f} ms per tier past the first (from {len(tiered)} steps over several tiers)"
    refitted = replace(profile, coefficients=dict(model.coefficients), samples=samples_table(every),
                       held_back_error=tuple(after), notes=(*profile.notes, note),
                       host=profile.host if host is None else tuple(host), tier_s=tier_s)
    return Refit(refitted, before, after, len(real), host, len(tiered))
