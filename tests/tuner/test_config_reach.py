"""Issue 31's bound on how far the CLI's whole config travels (`tests/tuner/config_reach.py` says how it is
followed): from `tuner.app.run(cfg)`, at most 12 files and at most 5 returns to a file it had left."""

from __future__ import annotations

from tests.tuner.config_reach import config_reach


def test_the_whole_config_reaches_at_most_12_files_and_returns_at_most_5_times():
    reach = config_reach()
    assert len(reach.files) <= 12, reach.files
    assert len(reach.returns) <= 5, reach.returns


def test_past_the_edge_no_phase_takes_the_whole_config():
    reached = {s.callee for s in config_reach().stops}
    phases = ("tuner.search.objective", "tuner.search.study", "tuner.results.conclude", "tuner.results.finalists",
              "tuner.results.summary", "tuner.tracking")
    assert not [c for c in reached if c.startswith(phases)]
