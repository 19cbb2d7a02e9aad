"""A re-measurement that may not start from the search's figure (sim+real: that figure was simulated) starts just
below the fastest rate its window can show and steps down, on the fake executor (known capacity, no noise)."""

from __future__ import annotations

import dataclasses
import math

from runtime import EngineConfig
from tuner.measure.measure import highest_scale
from tuner.measure.plan import top_start
from tuner.results.finalists import Candidate, measure_once
from tuner.testing import FakeExecutor, fake_app, window

TRUE_RPS = 3.0  # the fake's capacity, req/s; the window arrives at 1 req/s over 99 s


def _measuring(min_window_s: float):
    app = fake_app()
    return dataclasses.replace(app.measuring, min_window_s=min_window_s)


def _candidate(search_value: float) -> Candidate:
    return Candidate("trial 1", 1, EngineConfig.from_flat("tiny", device="cpu"), search_value, {})


def test_the_start_lies_within_two_tolerances_below_the_windows_fastest_rate():
    measuring = _measuring(10.0)
    top = highest_scale(99.0, 10.0)
    assert top == 9.9
    tol = measuring.tuner.capacity_tol
    starts = [top_start(measuring, 99.0, f"trial 1/search/{r}") for r in range(20)]
    assert all(top / (1 + tol) ** 2 <= s <= top for s in starts)
    assert len(set(starts)) == 20  # dithered: rounds do not share one bisection grid
    assert top_start(measuring, 99.0, "trial 1/search/0") == starts[0]  # seeded by the measurement's identity


def test_an_independent_measurement_starts_high_and_finds_the_capacity_from_above():
    measuring, executor = _measuring(10.0), FakeExecutor(lambda _: TRUE_RPS, 0.0, 0)
    # a simulated search value ten times the truth: independent, it is not where the bracket begins
    kept, reason = measure_once(executor, measuring, _candidate(30.0), window("search"), 0, [], independent=True)
    assert reason == "" and not kept.saturated
    first = kept.probes[0]
    assert not first.passed and 9.9 / (1 + measuring.tuner.capacity_tol) ** 2 <= first.scale <= 9.9
    assert TRUE_RPS / (1 + measuring.tuner.capacity_tol) <= kept.value <= TRUE_RPS
    assert not any(p.passed and p.scale > TRUE_RPS for p in kept.probes)


def test_a_dependent_measurement_starts_at_the_search_value():
    measuring, executor = _measuring(10.0), FakeExecutor(lambda _: TRUE_RPS, 0.0, 0)
    kept, _ = measure_once(executor, measuring, _candidate(2.5), window("search"), 0, [], independent=False)
    tol = measuring.tuner.capacity_tol
    assert 2.5 / (1 + tol) <= kept.probes[0].scale <= 2.5 * (1 + tol)


def test_a_window_that_cannot_show_the_capacity_is_saturated_at_its_top():
    measuring, executor = _measuring(50.0), FakeExecutor(lambda _: TRUE_RPS, 0.0, 0)  # top: 99 / 50 = 1.98 req/s
    kept, _ = measure_once(executor, measuring, _candidate(30.0), window("search"), 0, [], independent=True)
    # the dithered start passes, then the top itself: the most this window can show, a lower bound
    assert kept.saturated and [p.passed for p in kept.probes] == [True, True]
    assert kept.probes[0].scale < 1.98 and math.isclose(kept.probes[1].scale, 1.98)
    assert math.isclose(kept.value, 1.98)
