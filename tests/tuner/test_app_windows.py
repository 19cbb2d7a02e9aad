"""The console warns when a window is too short for its attainment to allow a single miss; a selection too short
to hold a rate for replay.min_window_s is refused with its numbers."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from tuner.config import ReplayConfig, SloConfig
from tuner.inputs import _require_duration, _warn_if_no_miss_allowed
from tuner.testing import fake_app
from tuner.traffic import ReplayWindow, TrafficError, TrafficRequest


def _window(n: int) -> ReplayWindow:
    return ReplayWindow("validation", tuple(range(n)), 1.0)  # only the count matters here


def test_a_window_under_100_requests_at_p99_warns_with_the_count_needed(caplog):
    with caplog.at_level(logging.WARNING, logger="pagetune"):
        _warn_if_no_miss_allowed(_window(23), SloConfig())
    [record] = caplog.records
    assert record.getMessage().startswith("the validation window has 23 requests: at slo.attainment 0.99 not one "
                                          "may miss")
    assert "100 or more requests let one miss" in record.getMessage()


def test_long_enough_windows_and_strict_attainment_say_nothing(caplog):
    with caplog.at_level(logging.WARNING, logger="pagetune"):
        _warn_if_no_miss_allowed(_window(100), SloConfig())
        _warn_if_no_miss_allowed(_window(5), SloConfig(attainment=1.0))
        _warn_if_no_miss_allowed(None, SloConfig())
    assert caplog.records == []


def test_a_selection_too_short_to_hold_a_rate_for_min_window_s_is_refused_with_its_numbers():
    app = dataclasses.replace(fake_app(), replay=ReplayConfig(min_window_s=60.0))
    requests = tuple(TrafficRequest(f"r{i}", i * 0.25, (5, 6), 1, f"f:{i}") for i in range(121))  # 30 s at 4 req/s
    with pytest.raises(TrafficError) as e:
        _require_duration(app, "selection", requests, 120.0)
    assert str(e.value) == (
        f"{app.traffic}: the selection spans 30 s (121 requests, 4 req/s), under the 120 s it needs: a capacity is a "
        "rate held for replay.min_window_s=60 s, so a window of 121 requests shows none above 2 req/s, and the "
        "held-out window takes the last replay.min_window_s seconds at least. Replay a longer window "
        "(replay.duration_s, replay.max_requests), or lower replay.min_window_s")
    _require_duration(app, "selection", requests, 30.0)  # long enough: nothing said
