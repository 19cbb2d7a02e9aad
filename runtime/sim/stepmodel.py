"""The step-time model: how long one engine step takes, from what the step contains (numpy, no torch).

A step is described per tier by a `StepShape`; its time is linear in five features, with one set of
coefficients per `Variant` (block size, KV dtype, a replayed decode graph or an eager forward):

    t = c0 + c1 * prefill_tokens + c2 * prefill_attention + c3 * decode_seqs + c4 * decode_context
        ^const  ^GEMMs of the chunks  ^sum of chunk x context   ^GEMMs of decodes ^KV read by decodes

`prefill_tokens` counts the padding rows an eager step adds (`pad_multiple`) and `decode_seqs` the graph
bucket a replayed decode step fills, so padding costs what it costs. A step over several tiers (one
attention launch per tier, one set of GEMMs) takes its constant and GEMM terms from its first tier's
variant and each tier's attention terms from that tier's. A variant that was not profiled borrows the
nearest one profiled (same graphs and dtype first, then the closest block size).

`fit` solves each variant's coefficients by least squares (columns scaled, so a feature counted in
millions does not drown the constant); `fit_error` is the relative error on points the fit never saw.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

FEATURES = ("const", "prefill_tokens", "prefill_attention", "decode_seqs", "decode_context")


class StepShape(NamedTuple):
    """What one tier of a step computes."""

    prefill_tokens: int = 0  # tokens of prefill chunks (and pad rows of an eager step)
    prefill_attention: int = 0  # sum over chunks of chunk tokens x context at the chunk's end
    decode_seqs: int = 0  # decode rows (padded to the graph bucket when a graph replays)
    decode_context: int = 0  # sum of the decodes' context lengths

    def features(self, const: float = 1.0) -> tuple[float, ...]:
        return (const, float(self.prefill_tokens), float(self.prefill_attention), float(self.decode_seqs),
                float(self.decode_context))


class Variant(NamedTuple):
    """The engine settings that change a step's cost beyond its shape."""

    block_size: int
    kv_dtype: str = "auto"  # the runtime's cache.kv_cache_dtype
    graphs: bool = False  # a pure-decode step replayed from a CUDA graph

    @property
    def key(self) -> str:
        return f"bs{self.block_size}/{self.kv_dtype}/{'graph' if self.graphs else 'eager'}"

    @classmethod
    def parse(cls, key: str) -> Variant:
        """The inverse of `key`: "bs16/auto/eager" -> Variant(16, "auto", False)."""
        bs, dtype, mode = key.split("/")
        if not bs.startswith("bs") or mode not in ("graph", "eager"):
            raise ValueError(f"step-time variant {key!r}: expected bs<N>/<kv dtype>/graph|eager")
        return cls(int(bs[2:]), dtype, mode == "graph")


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
    # Variant -> the coefficients it resolves to: a cache filled on first use (every simulated step asks)
    _resolved: dict[Variant, tuple[float, ...]] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.coefficients:
            raise ValueError("a step-time model needs the coefficients of at least one variant")
        for key, coef in self.coefficients.items():
            Variant.parse(key)
            if len(coef) != len(FEATURES):
                raise ValueError(f"step-time variant {key}: {len(coef)} coefficients, expected {len(FEATURES)}")

    def resolve(self, variant: Variant) -> Variant:
        """`variant` if it was profiled, else the nearest profiled one (graphs, dtype, then block size)."""
        if variant.key in self.coefficients:
            return variant
        known = [Variant.parse(k) for k in self.coefficients]

        def distance(v: Variant) -> tuple[int, int, float]:
            return (v.graphs != variant.graphs, v.kv_dtype != variant.kv_dtype,
                    abs(math.log2(v.block_size) - math.log2(variant.block_size)))

        return min(known, key=distance)

    def _coefficients(self, variant: Variant) -> tuple[float, ...]:
        """The coefficients `variant` uses, resolved once per variant (every simulated step asks)."""
        cached = self._resolved.get(variant)
        if cached is None:
            cached = self._resolved[variant] = self.coefficients[self.resolve(variant).key]
        return cached

    def predict(self, variant: Variant, shape: StepShape) -> float:
        """Seconds for a one-tier step."""
        return self.predict_tiers([(variant, shape)])

    def predict_tiers(self, parts: Sequence[tuple[Variant, StepShape]]) -> float:
        """Seconds for a step over several tiers: one constant and GEMM terms (first tier's variant),
        attention terms per tier."""
        if not parts:
            return 0.0
        first = self._coefficients(parts[0][0])
        total = first[0]
        for i, (variant, shape) in enumerate(parts):
            own = first if i == 0 else self._coefficients(variant)
            # the products of `shape.features()`, without building it (float * int rounds as float * float(int))
            total += (first[1] * shape.prefill_tokens + own[2] * shape.prefill_attention
                      + first[3] * shape.decode_seqs + own[4] * shape.decode_context)
        return max(total, 0.0)


def fit(samples: Iterable[StepSample]) -> StepTimeModel:
    """Least squares per variant over its samples (a variant whose samples never vary a feature gets 0 for it)."""
    by_variant: dict[str, list[StepSample]] = {}
    for s in samples:
        by_variant.setdefault(s.variant.key, []).append(s)
    return StepTimeModel({key: _solve(group) for key, group in sorted(by_variant.items())})


def _solve(group: list[StepSample]) -> tuple[float, ...]:
    x = np.array([s.shape.features() for s in group], dtype=np.float64)  # [N, F]
    y = np.array([s.seconds for s in group], dtype=np.float64)  # [N]
    scale = np.linalg.norm(x, axis=0)
    scale[scale == 0] = 1.0
    coef, *_ = np.linalg.lstsq(x / scale, y, rcond=None)
    return tuple(float(c) for c in coef / scale)


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
