"""Issue 31's bound on how far the CLI's whole config travels (`tests/tuner/config_reach.py` says how it is
followed): from `tuner.app.run(cfg)`, at most 12 files and at most 5 returns to a file it had left; and the
number of stops as it stands now (22), so a new one is a decision rather than a drift."""

from __future__ import annotations

from tests.tuner.config_reach import config_reach
from tuner.executors.selection import Executors
from tuner.study_run import StudyRun


def test_the_whole_config_reaches_at_most_12_files_and_returns_at_most_5_times():
    reach = config_reach()
    assert len(reach.files) <= 12, reach.files
    assert len(reach.returns) <= 5, reach.returns
    assert len(reach.stops) <= 22, reach.stops


def test_what_outlives_the_edge_holds_no_whole_config():
    """The study's objects (and the executors inside them) carry what the phases use, not the AppConfig."""
    for built in (StudyRun, Executors):
        assert "AppConfig" not in built.__annotations__.values(), built


def test_past_the_edge_no_phase_takes_the_whole_config():
    reached = {s.callee for s in config_reach().stops}
    phases = ("tuner.search.objective", "tuner.search.study", "tuner.results.conclude", "tuner.results.finalists",
              "tuner.results.summary", "tuner.tracking")
    assert not [c for c in reached if c.startswith(phases)]
