"""Every config at capacity 0: the SLO a capacity search can use, from per-request latencies."""

from __future__ import annotations

from tuner.config import SloConfig
from tuner.results.no_capacity import propose_slo


def _row(ttft: float | None, tpot: float | None) -> dict:
    return {"ttft_s": ttft, "tpot_s": tpot, "e2e_s": None if ttft is None else ttft + 1.0,
            "rejected": "" if ttft is not None else "too long"}


def test_only_the_bound_that_is_missed_is_raised_to_the_slowest_request_rounded_up():
    rows = [_row(0.5, 0.05)] * 30 + [_row(1.2, 0.2013)] * 3  # TPOT misses for 3 of 33
    assert propose_slo(rows, SloConfig()) == SloConfig(ttft_s=2.0, tpot_s=0.21)


def test_the_attainment_target_leaves_the_slowest_requests_out():
    rows = [_row(0.5, 0.05)] * 99 + [_row(9.0, 0.5)]  # 1 of 100 may miss at 99%
    assert propose_slo(rows, SloConfig()) == SloConfig()
    assert propose_slo(rows, SloConfig(attainment=1.0)) == SloConfig(ttft_s=9.0, tpot_s=0.5, attainment=1.0)


def test_requests_that_miss_one_bound_each_raise_both_by_their_joint_ratio():
    # 2 of 100 may not miss at 98%: one misses TTFT, another TPOT; each bound alone holds at the target
    rows = [_row(0.5, 0.05)] * 96 + [_row(3.0, 0.05), _row(0.5, 0.3), _row(3.0, 0.05), _row(0.5, 0.3)]
    proposed = propose_slo(rows, SloConfig(attainment=0.98))
    assert proposed == SloConfig(ttft_s=3.0, tpot_s=0.15, attainment=0.98)  # ratio 1.5: two TPOT misses left
