"""The conclusion's rounds by executor, and simulated rounds measured side by side equal to one at a time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.runtime.sim.sim_factories import write_tiny_profile
from tuner.executors.sim import SimExecutor
from tuner.results.conclude import measurements_planned
from tuner.results.rounds import Rounds, conclusion_rounds
from tuner.testing import FakeExecutor, fake_app

ROOT = Path(__file__).parents[3]


def test_a_simulated_conclusion_selects_in_one_round_and_proves_in_all():
    app = fake_app(select_rounds=3, proof_rounds=8)
    assert conclusion_rounds(SimExecutor.__new__(SimExecutor), app.validation) == Rounds(select=1, proof=8)
    assert conclusion_rounds(FakeExecutor(lambda c: 1.0, 0.1, 0), app.validation) == Rounds(select=3, proof=8)


def test_the_progress_bar_counts_the_measurements_of_the_executor():
    app = fake_app(select_rounds=3, proof_rounds=8)
    assert measurements_planned(app.validation, 3, SimExecutor.__new__(SimExecutor)) == 1 * 4 + 8 * 2
    assert measurements_planned(app.validation, 3, FakeExecutor(lambda c: 1.0, 0.1, 0)) == 3 * 4 + 8 * 2


def test_simulated_rounds_side_by_side_equal_the_same_rounds_one_at_a_time(tmp_path):
    """In a fresh interpreter, as the tuner's parent (no torch): two workers, then one, on the same rounds."""
    profile = write_tiny_profile(tmp_path)
    done = subprocess.run([sys.executable, "-m", "tests.tuner.results.rounds_check", str(profile)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={k: v for k, v in os.environ.items() if k != "PAGETUNE_PARALLEL_SIM"})  # the default
    assert done.returncode == 0, done.stderr[-3000:]
    workers, ticks, equal, values = done.stdout.splitlines()
    assert (workers, ticks, equal) == ("workers 2", "ticks 4", "equal True")
    assert values == "values [287.1015498811621, 299.13294181408406] [22.655178842940654, 21.90366634921502]"
