"""select (window, sample, cap, time scale) and split_windows, on hand-made requests."""

from __future__ import annotations

import pytest

from tuner.traffic import TrafficError, TrafficRequest, Windows, select, split_windows


def _requests(*arrivals: float) -> tuple[TrafficRequest, ...]:
    return tuple(TrafficRequest(f"r{i}", t, (5, 6), 1, f"f:{i}") for i, t in enumerate(arrivals))


SIX = _requests(0.0, 1.0, 2.0, 3.0, 4.0, 5.0)


def _view(requests: tuple[TrafficRequest, ...]) -> list[tuple[str, float]]:
    return [(r.request_id, r.arrival_s) for r in requests]


def test_window_rebases_to_zero():
    assert _view(select(SIX, start_s=1.0, duration_s=3.0)) == [("r1", 0.0), ("r2", 1.0), ("r3", 2.0)]
    assert _view(select(SIX, start_s=4.5)) == [("r5", 0.0)]


def test_time_scale_divides_arrivals():
    scaled = select(SIX, start_s=1.0, duration_s=3.0, time_scale=2.0)
    assert _view(scaled) == [("r1", 0.0), ("r2", 0.5), ("r3", 1.0)]
    assert _view(select(SIX, max_requests=2, time_scale=0.5)) == [("r0", 0.0), ("r1", 2.0)]


def test_sample_is_seeded_stable_and_nested():
    half = select(SIX, sample=0.5, seed=0)
    assert _view(half) == [("r1", 0.0), ("r4", 3.0), ("r5", 4.0)]  # pinned: blake2b ranks, any machine
    assert select(SIX, sample=0.5, seed=0) == half
    assert {r.request_id for r in half} <= {r.request_id for r in select(SIX, sample=0.8, seed=0)}
    assert [r.request_id for r in select(SIX, sample=0.5, seed=1)] == ["r0", "r4", "r5"]
    assert [r.request_id for r in select(SIX, sample=0.01)] == ["r4"]  # at least one
    assert [r.request_id for r in select(SIX, sample=0.5, max_requests=2)] == ["r1", "r4"]  # cap after sample


def test_select_returns_new_records_and_leaves_the_input():
    out = select(SIX, start_s=2.0)
    assert out[0] == TrafficRequest("r2", 0.0, (5, 6), 1, "f:2") and SIX[2].arrival_s == 2.0


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"start_s": 10.0, "duration_s": 1.0}, "no request of the 6 arrives in the window [10.0, 11.0) s"),
    ({"start_s": 10.0}, "no request of the 6 arrives in the window from 10.0 s"),
    ({"start_s": -1.0}, "start_s must be >= 0, got -1.0"),
    ({"duration_s": 0.0}, "duration_s must be > 0, got 0.0"),
    ({"max_requests": 0}, "max_requests must be an integer >= 1, got 0"),
    ({"max_requests": True}, "max_requests must be an integer >= 1, got True"),
    ({"sample": 1.5}, "sample must be in (0, 1], got 1.5"),
    ({"time_scale": float("nan")}, "time_scale must be > 0, got nan"),
    ({"seed": 0.5}, "seed must be an integer, got 0.5"),
])
def test_select_errors(kwargs, message):
    with pytest.raises(TrafficError) as e:
        select(SIX, **kwargs)
    assert str(e.value) == message


def test_split_windows_by_time_in_time_order():
    search, validation = split_windows(SIX, 0.25)  # the last 1.25 s of 5 s: arrivals at 4 and 5
    assert _view(search) == [("r0", 0.0), ("r1", 1.0), ("r2", 2.0), ("r3", 3.0)]
    assert _view(validation) == [("r4", 0.0), ("r5", 1.0)]
    assert split_windows(SIX, 0.0) == Windows(SIX, ())
    assert [len(w) for w in split_windows(SIX, 0.01)] == [5, 1]  # at least one held out
    assert [len(w) for w in split_windows(SIX, 0.1, min_held_s=3.0)] == [2, 4]  # at least the last 3 s
    assert [len(w) for w in split_windows(SIX, 0.1, min_held_s=2.5)] == [2, 4]  # spanning 2.5 s: from 2.0
    dense_tail = _requests(0.0, 3.0, 4.5, 4.6, 4.7, 4.8, 4.9, 5.0)  # by time, not by count: 6 of 8 in the last 20%
    assert [len(w) for w in split_windows(dense_tail, 0.2)] == [2, 6]


@pytest.mark.parametrize(("requests", "fraction", "message"), [
    (SIX, 1.0, "holdout_fraction must be in [0, 1), got 1.0"),
    (SIX, -0.1, "holdout_fraction must be in [0, 1), got -0.1"),
    (SIX[:1], 0.5, "cannot hold out the last 0 s of a 0 s selection (1 requests) and keep any for the search"),
])
def test_split_windows_errors(requests, fraction, message):
    with pytest.raises(TrafficError) as e:
        split_windows(requests, fraction)
    assert str(e.value) == message
