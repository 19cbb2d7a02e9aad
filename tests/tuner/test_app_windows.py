"""The console warns when a window is too short for its attainment to allow a single miss."""

from __future__ import annotations

import logging

from tuner.app import _warn_if_no_miss_allowed
from tuner.config import SloConfig
from tuner.traffic import ReplayWindow


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
