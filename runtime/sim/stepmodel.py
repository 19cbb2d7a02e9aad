"""The step-time model: how long one engine step takes, from what the step contains (numpy, no torch).

A step is described per tier by a `StepShape`; its time is the larger of a floor and a work term linear
in five features, with one set of coefficients per `Variant` (block size, KV dtype, and the step's path:
an eager forward, piecewise graphs, or a replayed full decode graph):

    t = max(floor, c0 + c1 * prefill_tokens + c2 * prefill_attention + c3 * decode_seqs + c4 * decode_context)
        ^launch   ^const  ^GEMMs of the chunks  ^sum of chunk x context  ^GEMMs of decodes ^KV read by decodes

The floor is what an eager forward costs the host to launch (32 layers of Python and kernel launches,
about 16 ms for Llama-3-8B on an H200): while the device's work is shorter the step waits for the
launches, and once it is longer the launches hide behind it. A sum would charge a 2,048-token prefill
both (measured 48 ms, a sum predicts 54). Piecewise graphs replay everything but the attention, so their
floor is the attention's launches alone, and their own coefficients carry it. A variant's coefficients are
the five, then the floor (a profile without it: 0).

`prefill_tokens` counts the padding rows a step adds (an eager step's `pad_multiple`, a piecewise step's
bucket) and `decode_seqs` the graph bucket a replayed decode step fills, so padding costs what it costs.
A step over several tiers (one attention launch per tier, one set of GEMMs) is its tiers' shapes summed,
at its first tier's variant's coefficients, and each tier past the first adds `tier_s` (its own cache
write, attention and copy launches in every layer, which an eager step's host pays in full; 7.6 ms for
Llama-3-8B on an H200, the mean over 27,514 real eager steps over two tiers, whose mean ranged from 2.5 to
13.9 ms from one call to the next; the profile command now times it on the engine the defaults build).
One variant's coefficients, not the GEMM terms of one and the attention terms of another: in real steps
a chunk's tokens and its attention grow together, so each variant's fit splits their cost its own way
(the H200 profile's bs32 eager variant has half bs16's attention coefficient and a higher token one). A
mix of the two predicted real H200 steps with a prefill chunk over two tiers a median 35 ms short, one
variant 3 ms (before `tier_s`; experiments/RESULTS.md). A variant that was not profiled borrows the
nearest one profiled: its own path first, then the nearest path (`BORROW`: a profile from before piecewise
graphs prices a piecewise step as an eager one), then the same dtype, then the closest block size.

`fit` solves each variant's coefficients by least squares (columns scaled, so a feature counted in
millions does not drown the constant) for each floor it tries, and keeps the floor whose model has
the smallest relative error; `fit_error` is the relative error on points the fit never saw;
`fit_tier_cost` gives `tier_s` from timed steps over several tiers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

FEATURES = ("const", "prefill_tokens", "prefill_attention", "decode_seqs", "decode_context")
# Engine fields the model does not see: the kernels' path thresholds and the prefill kernel (one step time whatever
# their values) and swap (a swapped block's copy costs nothing here, so swap would look free): a simulated study
# must not search them.
UNMODELLED = frozenset({"kernel.flash_min_len", "kernel.split_kv_min_len", "kernel.prefill_kernel",
                        "scheduler.preemption_mode", "cache.swap_space"})


class StepShape(NamedTuple):
    """What one tier of a step computes."""

    prefill_tokens: int = 0  # tokens of prefill chunks (and pad rows of an eager step)
    prefill_attention: int = 0  # sum over chunks of chunk tokens x context at the chunk's end
    decode_seqs: int = 0  # decode rows (padded to the graph bucket when a graph replays)
    decode_context: int = 0  # sum of the decodes' context lengths

    def features(self, const: float = 1.0) -> tuple[float, ...]:
        return (const, float(self.prefill_tokens), float(self.prefill_attention), float(self.decode_seqs),
                float(self.decode_context))


# A step's path through the runner: an eager forward; piecewise graphs (every step up to the capture size: the
# model replayed in pieces, the attention eager between them); a full graph (a pure-decode step in a bucket).
MODES = ("eager", "piecewise", "graph")
# The paths a variant borrows when its own was not profiled, nearest first.
BORROW = {"eager": ("piecewise", "graph"), "piecewise": ("eager", "graph"), "graph": ("piecewise", "eager")}


class Variant(NamedTuple):
    """The engine settings that change a step's cost beyond its shape."""

    block_size: int
    kv_dtype: str = "auto"  # the runtime's cache.kv_cache_dtype
    mode: str = "eager"  # the step's path, one of MODES

    @property
    def key(self) -> str:
        return f"bs{self.block_size}/{self.kv_dtype}/{self.mode}"

    @classmethod
    def parse(cls, key: str) -> Variant:
        """The inverse of `key`: "bs16/auto/piecewise" -> Variant(16, "auto", "piecewise")."""
        bs, dtype, mode = key.split("/")
        if not bs.startswith("bs") or mode not in MODES:
            raise ValueError(f"step-time variant {key!r}: expected bs<N>/<kv dtype>/{'|'.join(MODES)}")
        return cls(int(bs[2:]), dtype, mode)


class StepSample(NamedTuple):
    """One timed step of one tier: what it contained and how long it took."""

    variant: Variant
    shape: StepShape
    seconds: float


class FitError(NamedTuple):
    """Relative error |predicted - measured| / measured over points held back from the fit."""

    points: int
    median: float
    p90: float
    max: float

    def line(self) -> str:
        return (f"{self.points} held-back steps: median {self.median:.1%}, p90 {self.p90:.1%}, "
                f"max {self.max:.1%} relative error")


@dataclass(frozen=True)
class StepTimeModel:
    coefficients: Mapping[str, tuple[float, ...]]  # Variant.key -> one coefficient per FEATURES entry
    tier_s: float = 0.0  # what each tier past the first adds to a step
    # each profiled Variant -> its coefficients with the floor last (0.0 when fitted without one): derived once in
    # __post_init__ and never written after (a plain dict, so the model pickles)
    _profiled: dict[Variant, tuple[float, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.coefficients:
            raise ValueError("a step-time model needs the coefficients of at least one variant")
        for key, coef in self.coefficients.items():
            Variant.parse(key)
            if len(coef) not in (len(FEATURES), len(FEATURES) + 1):
                raise ValueError(f"step-time variant {key}: {len(coef)} coefficients, expected {len(FEATURES)} "
                                 f"and a floor ({len(FEATURES) + 1})")
        if not (math.isfinite(self.tier_s) and self.tier_s >= 0):
            raise ValueError(f"tier_s: a step's cost per extra tier must be >= 0 seconds, got {self.tier_s}")
        profiled = {Variant.parse(key): (*coef, 0.0)[: len(FEATURES) + 1] for key, coef in self.coefficients.items()}
        object.__setattr__(self, "_profiled", profiled)

    def resolve(self, variant: Variant) -> Variant:
        """`variant` if it was profiled, else the nearest profiled one (path, dtype, then block size)."""
        if variant in self._profiled:
            return variant
        paths = (variant.mode, *BORROW[variant.mode])

        def distance(v: Variant) -> tuple[int, int, float]:
            return (paths.index(v.mode), v.kv_dtype != variant.kv_dtype,
                    abs(math.log2(v.block_size) - math.log2(variant.block_size)))

        return min(self._profiled, key=distance)

    def _coefficients(self, variant: Variant) -> tuple[float, ...]:
        """The coefficients `variant` uses with its floor last (every simulated step asks: a profiled variant is
        one lookup)."""
        coef = self._profiled.get(variant)
        return coef if coef is not None else self._profiled[self.resolve(variant)]

    def predict(self, variant: Variant, shape: StepShape) -> float:
        """Seconds for a one-tier step."""
        return self.predict_tiers([(variant, shape)])

    def predict_tiers(self, parts: Sequence[tuple[Variant, StepShape]]) -> float:
        """Seconds for a step over several tiers: the tiers' shapes summed, at the first tier's variant's
        coefficients and floor, and `tier_s` per tier past the first."""
        if not parts:
            return 0.0
        c = self._coefficients(parts[0][0])
        total = c[0]
        for _, shape in parts:
            # the products of `shape.features()`, without building it (float * int rounds as float * float(int))
            total += (c[1] * shape.prefill_tokens + c[2] * shape.prefill_attention
                      + c[3] * shape.decode_seqs + c[4] * shape.decode_context)
        return max(total, c[5], 0.0) + self.tier_s * (len(parts) - 1)


HICCUP = 3.0  # a step measured this many times its fitted prediction is a hiccup, not its shape's cost
HICCUP_PASSES = 3
FLOOR_QUANTILES = np.linspace(0.0, 0.6, 25)  # the floors a fit starts from: these quantiles of the steps' times
FLOOR_PASSES = 4


def fit(samples: Iterable[StepSample]) -> StepTimeModel:
    """Per variant: the floor and the least-squares work term (a variant whose samples never vary a feature
    gets 0 for it) with the smallest relative error over its samples.

    For each floor tried (none, then from quantiles of the measured times) the work term is fitted on the
    steps measured above the floor, then each step goes to the regime that predicts it and both are refitted
    (`_floored`). Robust to hiccups: a real replay has steps that take 10-100x their shape's
    cost (a kernel compiled on first use, a host stall), and one 1-second step outweighs thousands of 7 ms
    ones in least squares. Steps measured above `HICCUP` x the work term's prediction are left out and the
    work term refitted, up to `HICCUP_PASSES` times; in the error a step counts at most 1."""
    by_variant: dict[str, list[StepSample]] = {}
    for s in samples:
        by_variant.setdefault(s.variant.key, []).append(s)
    return StepTimeModel({key: _solve(group) for key, group in sorted(by_variant.items())})


def _solve(group: list[StepSample]) -> tuple[float, ...]:
    x = np.array([s.shape.features() for s in group], dtype=np.float64)  # [N, F]
    y = np.array([s.seconds for s in group], dtype=np.float64)  # [N]
    best_coef, best_floor = _work_term(x, y), 0.0
    best = _relative_error(x, y, best_coef, best_floor)
    for start in np.unique(np.quantile(y, FLOOR_QUANTILES)):
        coef, floor = _floored(x, y, float(start))
        if coef is None:
            continue
        error = _relative_error(x, y, coef, floor)
        if error < best * (1 - 1e-9) - 1e-12:  # a floor must earn its place: ties keep none
            best, best_coef, best_floor = error, coef, floor
    return (*(float(c) for c in best_coef), best_floor)


def _floored(x: np.ndarray, y: np.ndarray, floor: float) -> tuple[np.ndarray | None, float]:
    """max(floor, work) from a first floor: the work term on the steps above it, then alternately each step
    to the regime that predicts it (work above the floor, or on it), the work term refitted on its steps
    and the floor the median of its own."""
    above = y > floor
    coef = None
    for _ in range(FLOOR_PASSES):
        if above.sum() < 2 * x.shape[1]:
            return coef, floor
        coef = _work_term(x[above], y[above])
        regime = x @ coef > floor
        if (regime == above).all() or regime.all():
            break
        above = regime
        floor = float(np.median(y[~above]))
    return coef, floor


def _work_term(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares, refitted without hiccups."""
    coef = _lstsq(x, y)
    for _ in range(HICCUP_PASSES):
        predicted = x @ coef
        keep = (predicted <= 0) | (y <= HICCUP * predicted)  # no prediction to judge by: kept
        if keep.all() or keep.sum() < x.shape[1]:
            break
        x, y = x[keep], y[keep]
        coef = _lstsq(x, y)
    return coef


def _lstsq(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    scale = np.linalg.norm(x, axis=0)
    scale[scale == 0] = 1.0
    coef, *_ = np.linalg.lstsq(x / scale, y, rcond=None)
    return coef / scale


def _relative_error(x: np.ndarray, y: np.ndarray, coef: np.ndarray, floor: float) -> float:
    """Mean squared relative error of max(floor, work), each step's capped at 1 (a hiccup counts, not more)."""
    predicted = np.maximum(np.maximum(x @ coef, floor), 0.0)
    return float(np.mean(np.minimum(((predicted - y) / y) ** 2, 1.0)))


def fit_tier_cost(model: StepTimeModel, steps: Iterable[tuple[Sequence[tuple[Variant, StepShape]], float]]) -> float:
    """`tier_s` from timed steps over several tiers: the mean over them of what each took beyond `model`'s
    prediction without the tier cost, per tier past the first (at least 0). A mean, as `fit`'s least squares:
    what a queue feels is the steps' total, and real excesses are skewed (on an H200 a median of 4.6 ms under a
    mean of 7.6 ms), so a median would undercount it. Hiccups are left out as in `fit`: steps measured above
    `HICCUP` x their prediction with the median excess as the tier cost."""
    plain = StepTimeModel(model.coefficients)
    timed = [(seconds, plain.predict_tiers(parts), len(parts) - 1) for parts, seconds in steps if len(parts) > 1]
    if not timed:
        raise ValueError("fit_tier_cost needs at least one step over two or more tiers")
    typical = max(0.0, float(np.median([(seconds - predicted) / extra for seconds, predicted, extra in timed])))
    kept = [(seconds - predicted) / extra for seconds, predicted, extra in timed
            if seconds <= HICCUP * (predicted + typical * extra)]
    return max(0.0, float(np.mean(kept)))


def split_held_back(samples: Sequence[StepSample], every: int = 5) -> tuple[list[StepSample], list[StepSample]]:
    """(fit points, held-back points): every `every`-th sample of each variant is held back."""
    fit_points: list[StepSample] = []
    held: list[StepSample] = []
    seen: dict[str, int] = {}
    for s in samples:
        n = seen[s.variant.key] = seen.get(s.variant.key, 0) + 1
        (held if n % every == 0 else fit_points).append(s)
    return fit_points, held


def fit_error(model: StepTimeModel, samples: Sequence[StepSample]) -> FitError:
    """Relative error of `model` on `samples` (points it was not fitted on, to mean anything)."""
    if not samples:
        return FitError(0, math.nan, math.nan, math.nan)
    errors = np.array([abs(model.predict(s.variant, s.shape) - s.seconds) / s.seconds for s in samples])
    return FitError(len(samples), float(np.median(errors)), float(np.quantile(errors, 0.9)), float(errors.max()))
