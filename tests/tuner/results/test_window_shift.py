"""A config whose capacity moves several-fold between the search and held-out windows is said in the notes, on
the fake executor (known truth per window) with the real study, conclusion and report inputs."""

from __future__ import annotations

import optuna
import pytest

from tuner.results.shift import window_shift_notes
from tuner.testing import FakeExecutor, run_fake_study


@pytest.fixture(autouse=True)
def quiet_optuna():
    optuna.logging.set_verbosity(optuna.logging.ERROR)


def truth(config) -> float:
    return {8: 6.0, 16: 8.0, 32: 7.0}.get(config.cache.block_size, 5.0)


class TwoLoads:
    """The fake executor, with the baseline (block size 128, outside the searched choices) `factor` times its
    search capacity on the held-out window (its traffic key `validation`)."""

    def __init__(self, factor: float) -> None:
        self.search = FakeExecutor(truth, 0.0, 0)
        self.held = FakeExecutor(lambda c: truth(c) * (factor if c.cache.block_size == 128 else 1.0), 0.0, 0)

    def describe(self, config):
        return self.search.describe(config)

    def run(self, job, requests, on_progress, on_checkpoint, timeout_s):
        fake = self.held if job.traffic_key == "validation" else self.search
        return fake.run(job, requests, on_progress, on_checkpoint, timeout_s)

    def close(self):
        pass


SMALL = {"trials": 6, "finalists": 1, "select_rounds": 1, "proof_rounds": 2}


def test_a_baseline_ten_times_slower_on_the_held_out_window_is_said_with_its_arrivals(tmp_path):
    c, _ = run_fake_study(tmp_path, TwoLoads(0.1), 0, **SMALL)
    search, held = c.selection.median("baseline"), c.proof.median("baseline")
    assert 4.75 <= search <= 5.0 and 0.475 <= held <= 0.5  # the truth, to the bisection's 5%
    notes = window_shift_notes(c, "12 of 40 requests (30%) arrive with others at one instant")
    assert notes == [f"baseline: {held:.4g} req/s on the held-out window against {search:.4g} on the search window "
                     f"(x{held / search:.2g}): the two windows are different loads for this config, so the verdict "
                     "speaks of the held-out window's traffic; held-out arrivals: 12 of 40 requests (30%) arrive "
                     "with others at one instant"]


def test_a_shift_within_a_factor_three_is_not_a_note(tmp_path):
    c, _ = run_fake_study(tmp_path, TwoLoads(0.4), 0, **SMALL)
    assert window_shift_notes(c) == []
