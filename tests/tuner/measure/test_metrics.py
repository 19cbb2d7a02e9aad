"""tuner.measure.metrics on hand-built replays: every latency, percentile and aggregate computed by hand.

Timestamps are dyadic fractions so most values are exact in binary floating point; the
percentiles (numpy's linear interpolation: rank q/100 x (n-1) between sorted values) need approx.

    request  arrival  tokens at                        TTFT   TPOT     E2E    ITL
    a        0.0      0.25 0.375 0.5                   0.25   0.125    0.5    0.125 0.125
    b        0.5      0.75 0.8125                      0.25   0.0625   0.3125 0.0625
    c        1.0      2.0                              1.0    0 (n=1)  1.0    -
    d        1.5      1.75 2.0 2.25 2.5 4.0            0.25   0.5625   2.5    0.25 0.25 0.25 1.5
    x        2.0      rejected (max_model_len)         -      -        -      -
"""

from __future__ import annotations

import math

import pytest

from tests.tuner.tuner_factories import record
from tuner.config import SloConfig
from tuner.measure.metrics import (
    allowed_failures,
    certain_failures,
    decisive_failures,
    latency_row,
    meets_slo,
    replay_summary,
    slo_ratio,
    stop_after_misses,
    summarize,
)
from tuner.measure.timeline import ReplayResult

REJECTED = "prompt (100 tokens) + max_tokens (8) = 108 exceeds max_model_len 64"
A = record("a", 0.0, 0.25, (0.25, 0.375, 0.5), first_scheduled=0.125, cached_tokens=8, preemptions=1)
B = record("b", 0.5, 0.75, (0.75, 0.8125))
C = record("c", 1.0, 2.0, (2.0,), prompt_tokens=32, cached_tokens=16, first_scheduled=1.5)
D = record("d", 1.5, 1.75, (1.75, 2.0, 2.25, 2.5, 4.0), preemptions=2)
X = record("x", 2.0, None, (), prompt_tokens=100, rejected_reason=REJECTED)
# a and b meet TTFT <= 0.5 and TPOT <= 0.125 (a exactly at the bound); c misses TTFT, d misses TPOT.
SLO = SloConfig(ttft_s=0.5, tpot_s=0.125, attainment=0.4)


def replayed(*records, duration_s: float = 4.0, requests: int | None = None, stopped: bool = False) -> ReplayResult:
    n = len(records) if requests is None else requests
    return ReplayResult(tuple(records), n, duration_s, 1.25, stopped, kv_util_mean=0.375, kv_util_peak=0.5,
                        kv_waste_mean=0.15625)


def test_latency_rows_of_a_multi_token_a_one_token_and_a_rejected_request():
    assert latency_row(A) == {
        "request_id": "a", "arrival_s": 0.0, "prompt_tokens": 16, "output_tokens": 3, "cached_tokens": 8,
        "preemptions": 1, "queue_s": 0.125, "ttft_s": 0.25, "tpot_s": 0.125, "e2e_s": 0.5, "rejected": ""}
    one = latency_row(C)
    assert (one["queue_s"], one["ttft_s"], one["tpot_s"], one["e2e_s"]) == (0.5, 1.0, 0.0, 1.0)
    assert latency_row(D)["tpot_s"] == 0.5625  # (4.0 - 1.75) / 4
    assert latency_row(X) == {
        "request_id": "x", "arrival_s": 2.0, "prompt_tokens": 100, "output_tokens": 0, "cached_tokens": 0,
        "preemptions": 0, "queue_s": None, "ttft_s": None, "tpot_s": None, "e2e_s": None, "rejected": REJECTED}


def test_meets_slo_bounds_are_inclusive_and_a_rejection_always_misses():
    assert [meets_slo(latency_row(r), SLO) for r in (A, B, C, D, X)] == [True, True, False, False, False]
    tight = SloConfig(ttft_s=0.5, tpot_s=0.124)
    assert [meets_slo(latency_row(r), tight) for r in (A, B)] == [False, True]
    lenient = SloConfig(ttft_s=100.0, tpot_s=100.0)
    assert meets_slo(latency_row(X), lenient) is False


def test_summary_counts_throughput_goodput_and_attainment():
    m = summarize(replayed(A, B, C, D, X), SLO, peak_memory_gb=0.5)
    assert {k: m[k] for k in ("requests", "completed", "rejections", "duration_s", "busy_s", "preemptions",
                              "peak_memory_gb")} == {
        "requests": 5.0, "completed": 4.0, "rejections": 1.0, "duration_s": 4.0, "busy_s": 1.25,
        "preemptions": 3.0, "peak_memory_gb": 0.5}
    assert m["throughput_rps"] == 1.0  # 4 completed / 4 s
    assert m["output_tok_s"] == 2.75  # (3 + 2 + 1 + 5) tokens / 4 s
    assert m["goodput_rps"] == 0.5  # a and b / 4 s
    assert m["slo_attainment"] == 0.4  # 2 of 5: the rejected request counts as a miss


def test_e2e_bound_is_optional_and_applies_when_set():
    assert summarize(replayed(A, B, C, D, X), SLO, 0.0)["goodput_rps"] == 0.5  # e2e_s None: not bounded
    bounded = SloConfig(ttft_s=0.5, tpot_s=0.125, e2e_s=0.4, attainment=0.4)  # a (E2E 0.5) now misses
    m = summarize(replayed(A, B, C, D, X), bounded, 0.0)
    assert (m["goodput_rps"], m["slo_attainment"]) == (0.25, 0.2)


def test_slo_ratio_and_load():
    # Ratios (largest latency / bound): a max(0.5, 1.0), b max(0.5, 0.5), c max(2.0, 0), d max(0.5, 4.5), x inf.
    assert [slo_ratio(latency_row(r), SLO) for r in (A, B, C, D, X)] == [1.0, 0.5, 2.0, 4.5, math.inf]
    # slo_load: the ratio at the attainment target, nearest rank over the window: 0.4 of 5 -> the 2nd smallest.
    assert summarize(replayed(A, B, C, D, X), SLO, 0.0)["slo_load"] == 1.0
    assert summarize(replayed(A, B, C, D, X), SloConfig(ttft_s=0.5, tpot_s=0.125, attainment=0.8), 0.0)[
        "slo_load"] == 4.5
    # A stopped replay: the 3 requests it never finished count as misses of the 8 in the window.
    assert summarize(replayed(A, B, C, D, X, requests=8, stopped=True), SLO, 0.0)["slo_load"] == 4.5


def test_a_replay_passes_exactly_when_attainment_meets_the_target():
    result = replayed(A, B, C, D, X)  # attainment 0.4
    assert replay_summary(result, 1.0, SLO, 0.0).passed  # 0.4 >= 0.4, slo_load 1.0
    assert not replay_summary(result, 1.0, SloConfig(ttft_s=0.5, tpot_s=0.125, attainment=0.41), 0.0).passed
    both = replay_summary(replayed(A, B), 2.0, SloConfig(ttft_s=0.5, tpot_s=0.125, attainment=1.0), 0.0)
    assert (both.scale, both.passed, both.decisive) == (2.0, True, False)  # a sits at its bound: not clear
    clear = replay_summary(replayed(B), 1.0, SloConfig(ttft_s=0.5, tpot_s=0.125, attainment=1.0), 0.0)
    assert (clear.passed, clear.decisive) == (True, True)  # slo_load 0.5: half of every bound to spare
    assert [r["request_id"] for r in clear.rows] == ["b"]


def test_a_failure_is_decisive_three_times_past_what_attainment_allows():
    p99 = SloConfig()
    assert [allowed_failures(n, p99) for n in (12, 96, 100, 300)] == [0, 0, 1, 3]
    assert [decisive_failures(n, p99) for n in (12, 96, 100, 300)] == [3, 3, 6, 12]
    strict = SloConfig(ttft_s=0.5, tpot_s=0.125, attainment=1.0)  # any miss fails; 3 misses are decisive
    assert replay_summary(replayed(A, B, C, D, X), 1.0, strict, 0.0).decisive  # c, d, x missed
    two = replay_summary(replayed(A, B, C, X), 1.0, strict, 0.0)
    assert (two.passed, two.decisive) == (False, False)


def test_one_replay_a_probe_stops_at_the_first_miss_past_what_attainment_allows():
    p99 = SloConfig()
    assert [certain_failures(n, p99) for n in (12, 96, 100, 300)] == [1, 1, 2, 4]
    assert [stop_after_misses(300, p99, repeats) for repeats in (1, 2, 3)] == [4, 12, 12]


@pytest.mark.parametrize("attainment", [0.41, 0.5, 0.7, 0.9, 0.95, 0.99, 0.999, 1.0])
def test_certain_failures_misses_fail_a_replay_finished_or_stopped_and_one_fewer_can_pass(attainment):
    """The boundary `stop_after_misses` relies on, through the verdict itself (k misses fail, k - 1 may pass)."""
    slo = SloConfig(ttft_s=0.5, tpot_s=0.125, attainment=attainment)
    for n in [*range(1, 121), 199, 200, 201, 299, 300, 7055]:
        k = certain_failures(n, slo)
        good = [record(f"g{i}", 0.5, 0.75, (0.75, 0.8125)) for i in range(n - k)]
        missed = [record(f"m{i}", 1.0, 2.0, (2.0,)) for i in range(k)]  # TTFT 1.0 > 0.5
        assert not replay_summary(replayed(*good, *missed, requests=n), 1.0, slo, 0.0).passed, (n, k)
        # stopped at the k-th miss: fewer finished, the rest count as misses: still a failure
        assert not replay_summary(replayed(*missed, requests=n, stopped=True), 1.0, slo, 0.0).passed, (n, k)
        spared = [*good, record("g-last", 0.5, 0.75, (0.75, 0.8125)), *missed[1:]]  # k - 1 misses
        assert replay_summary(replayed(*spared, requests=n), 1.0, slo, 0.0).passed, (n, k)


def test_latency_percentiles_use_linear_interpolation():
    m = summarize(replayed(A, B, C, D, X), SLO, 0.0)
    # TTFT of the completed four, sorted [0.25, 0.25, 0.25, 1.0]: ranks 1.5, 2.7, 2.97.
    assert [m["ttft_p50_s"], m["ttft_p90_s"], m["ttft_p99_s"]] == pytest.approx([0.25, 0.775, 0.9775], rel=1e-12)
    # TPOT only where n > 1 (c has none), sorted [0.0625, 0.125, 0.5625]: ranks 1.0, 1.8, 1.98.
    assert [m["tpot_p50_s"], m["tpot_p90_s"], m["tpot_p99_s"]] == pytest.approx([0.125, 0.475, 0.55375], rel=1e-12)
    # E2E sorted [0.3125, 0.5, 1.0, 2.5]: ranks 1.5, 2.7, 2.97.
    assert [m["e2e_p50_s"], m["e2e_p90_s"], m["e2e_p99_s"]] == pytest.approx([0.75, 2.05, 2.455], rel=1e-12)
    # ITL of every request, sorted [0.0625, 0.125, 0.125, 0.25, 0.25, 0.25, 1.5]: ranks 3.0, 5.4, 5.94.
    assert [m["itl_p50_s"], m["itl_p90_s"], m["itl_p99_s"]] == pytest.approx([0.25, 0.75, 1.425], rel=1e-12)


def test_kv_figures_are_the_engine_totals():
    m = summarize(replayed(A, B), SLO, 0.0)
    assert (m["kv_util_mean"], m["kv_util_peak"], m["kv_waste_mean"]) == (0.375, 0.5, 0.15625)


def test_prefix_hit_rate_is_cached_over_computed_prompt_tokens():
    assert summarize(replayed(A, B, C, D), SLO, 0.0)["prefix_hit_rate"] == 0.3  # (8 + 16) / (16 + 16 + 32 + 16)
    # The rejected request's 100 prompt tokens never reached the cache: they do not dilute the rate.
    assert summarize(replayed(A, B, C, D, X), SLO, 0.0)["prefix_hit_rate"] == 0.3
    assert summarize(replayed(X), SLO, 0.0)["prefix_hit_rate"] == 0.0


def test_only_rejections_give_zero_rates_and_nan_percentiles():
    m = summarize(replayed(X, duration_s=1e-9), SLO, 0.0)
    assert (m["completed"], m["rejections"], m["throughput_rps"], m["goodput_rps"], m["slo_attainment"],
            m["slo_load"]) == (0.0, 1.0, 0.0, 0.0, 0.0, math.inf)
    assert all(math.isnan(m[f"{name}_p{q}_s"]) for name in ("ttft", "tpot", "e2e", "itl") for q in (50, 90, 99))
