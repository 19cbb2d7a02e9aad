"""The paired interval and the verdict, with values worked out by hand."""

from __future__ import annotations

import math

import pytest

from tuner.results.verdict import Saturation, paired_interval, t_quantile, verdict, with_latency


def test_t_quantiles_from_the_table_and_the_expansion():
    assert [t_quantile(df) for df in (1, 2, 5, 30)] == [12.706, 4.303, 2.571, 2.042]
    assert t_quantile(60) == pytest.approx(2.0003, abs=2e-4)  # 2.000 in tables
    assert t_quantile(1000) == pytest.approx(1.9623, abs=2e-4)
    with pytest.raises(ValueError, match="degrees of freedom must be >= 1"):
        t_quantile(0)


def test_paired_interval_by_hand():
    # Differences 2, 4, 3: mean 3, sd 1, t(0.975, 2) = 4.303: 3 +- 4.303 / sqrt(3).
    interval = paired_interval([12.0, 14.0, 13.0, None], [10.0, 10.0, 10.0, 9.0])
    half = 4.303 / math.sqrt(3)
    assert interval.rounds == 3 and interval.mean == 3.0 and interval.baseline_mean == 10.0
    assert (interval.low, interval.high) == pytest.approx((3.0 - half, 3.0 + half))
    assert interval.relative[0] == 0.3
    assert paired_interval([1.0, None], [1.0, 2.0]) is None  # one paired round: no interval


def test_verdict_improved_only_when_the_interval_excludes_zero():
    win = paired_interval([12.0, 14.0, 13.0], [10.0, 10.0, 10.0])
    assert verdict(False, win, "req/s", "held-out").improved
    assert verdict(False, win, "req/s", "held-out").headline == (
        "improved: +3 req/s (+30.0%; 95% CI +0.5157 .. +5.484 req/s, +5.2% .. +54.8%)")
    tie = paired_interval([12.0, 9.0, 10.0], [10.0, 10.0, 10.0])
    lost = verdict(False, tie, "req/s", "held-out")
    assert not lost.improved and lost.headline.startswith("no significant improvement: keep the baseline (pick - ")
    assert lost.method == "paired t-interval (95%) over 3 interleaved rounds on the held-out window"
    assert verdict(True, None, "req/s", "held-out").headline == (
        "no improvement: the baseline measured best; keep the baseline")
    assert not verdict(False, None, "req/s", "held-out").improved
    bounded = paired_interval([50.0, 50.0, 50.0], [10.0, 12.0, 11.0])  # the pick's values are lower bounds
    assert not verdict(False, bounded, "req/s", "held-out", saturated=Saturation(baseline=True)).improved
    at_least = verdict(False, bounded, "req/s", "held-out", saturated=Saturation(pick=True))
    assert at_least.improved and at_least.headline.startswith("improved, by at least: +39 req/s")
    lower_better = paired_interval([8.0, 7.0, 7.5], [10.0, 10.0, 10.0])
    assert verdict(False, lower_better, "s", "held-out", higher_is_better=False).improved


def test_pareto_verdict_covers_throughput_and_p99_latency():
    faster = verdict(False, paired_interval([120.0, 130.0, 125.0], [100.0, 100.0, 100.0]), "tok/s", "held-out")
    slower = paired_interval([0.9, 1.0, 0.95], [0.5, 0.5, 0.5])  # the pick's E2E p99 is 0.45 s worse
    blocked = with_latency(faster, slower)
    assert not blocked.improved
    assert blocked.headline.startswith("no significant improvement: keep the baseline (the pick's E2E p99 +0.45 s "
                                       "(+90.0%; 95% CI +0.3258 .. +0.5742 s")
    assert blocked.headline.endswith("is worse; throughput improved: +25 tok/s (+25.0%; 95% CI +12.58 .. +37.42 "
                                     "tok/s, +12.6% .. +37.4%))")
    assert blocked.method.endswith("both objectives: output tok/s and E2E p99")
    same = paired_interval([0.5, 0.52, 0.48], [0.5, 0.5, 0.5])
    kept = with_latency(faster, same)
    assert kept.improved and kept.headline.endswith("E2E p99 +0 s (+0.0%; 95% CI -0.04969 .. +0.04969 s, "
                                                    "-9.9% .. +9.9%), not worse")
    assert not with_latency(faster, None).improved  # latency not compared: no pareto claim


def test_a_baseline_of_zero_gives_no_relative_difference():
    interval = paired_interval([5.0, 6.0, 7.0], [0.0, 0.0, 0.0])
    assert verdict(False, interval, "req/s", "held-out").headline == (
        "improved: +6 req/s (95% CI +3.516 .. +8.484 req/s; the baseline measured 0)")
