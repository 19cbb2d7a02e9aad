"""Nearest-rank length percentiles and max_model_len candidates, on hand-computed cases."""

from __future__ import annotations

import pytest

from tuner.traffic import (
    LengthPercentile,
    MaxLenCandidate,
    TrafficError,
    TrafficRequest,
    length_percentiles,
    max_model_len_candidates,
)

LENGTHS = ((10, 1), (20, 2), (30, 3), (40, 4), (300, 10))  # totals 11, 22, 33, 44, 310
REQUESTS = tuple(TrafficRequest(f"r{i}", float(i), (7,) * p, o, f"f:{i}") for i, (p, o) in enumerate(LENGTHS))


def test_length_percentiles_nearest_rank():
    assert length_percentiles(REQUESTS) == (
        LengthPercentile(50, 30, 3, 33), LengthPercentile(90, 300, 10, 310),
        LengthPercentile(99, 300, 10, 310), LengthPercentile(100, 300, 10, 310))
    assert length_percentiles(REQUESTS, qs=(20, 40.5)) == (LengthPercentile(20, 10, 1, 11),
                                                           LengthPercentile(40.5, 30, 3, 33))


def test_total_is_per_request_not_the_sum_of_percentiles():
    mixed = (TrafficRequest("a", 0.0, (7,) * 100, 1, "f:1"), TrafficRequest("b", 0.0, (7,), 100, "f:2"))
    assert length_percentiles(mixed, qs=(100,)) == (LengthPercentile(100, 100, 100, 101),)


TOTALS = [r.total_tokens for r in REQUESTS]


def test_max_model_len_candidates_round_up_and_count_rejections():
    assert max_model_len_candidates(TOTALS) == [MaxLenCandidate(256, 0.2), MaxLenCandidate(512, 0.0)]
    assert max_model_len_candidates(TOTALS, multiple=16) == [MaxLenCandidate(48, 0.2),
                                                               MaxLenCandidate(320, 0.0)]
    assert max_model_len_candidates(TOTALS, qs=(20, 60), multiple=1) == [MaxLenCandidate(11, 0.8),
                                                                          MaxLenCandidate(33, 0.4)]


@pytest.mark.parametrize(("call", "message"), [
    (lambda: length_percentiles(()), "length statistics need at least one request"),
    (lambda: length_percentiles(REQUESTS, qs=(0,)), "percentiles must be in (0, 100], got 0"),
    (lambda: max_model_len_candidates(TOTALS, qs=(101,)), "percentiles must be in (0, 100], got 101"),
    (lambda: max_model_len_candidates(TOTALS, multiple=0), "multiple must be an integer >= 1, got 0"),
])
def test_stats_errors(call, message):
    with pytest.raises(TrafficError) as e:
        call()
    assert str(e.value) == message


def test_arrival_groups_count_requests_sharing_an_instant():
    from tuner.traffic import TrafficRequest, arrival_groups

    def req(t: float) -> TrafficRequest:
        return TrafficRequest(f"r:{t}", t, (1, 2), 3, "t.jsonl:1")

    groups = arrival_groups([req(0.0), req(0.0), req(0.0), req(1.5), req(2.0), req(2.0)])
    assert groups == (6, 3, 5, 3) and groups.share == 5 / 6
    assert groups.line().startswith("5 of 6 requests (83%) arrive with others at one instant (3 distinct arrival "
                                    "times, up to 3 at once): ")
    assert arrival_groups([req(0.0), req(1.0)]).grouped == 0
