"""The conclusion loses nothing: a failed re-measurement is made again with its reason said, and a signal
mid-conclusion keeps what was measured, so a rerun resumes it. On the fake executor (known, noiseless truth),
with the real study, finalists and verdict."""

from __future__ import annotations

import logging

import optuna
import pytest

from tuner.interrupts import Interrupted
from tuner.measure.job import TrialOutcome, TrialStatus
from tuner.results.conclude import conclude
from tuner.results.kept import KeptMeasurements
from tuner.testing import FakeExecutor, run_fake_search, run_fake_study, window


@pytest.fixture(autouse=True)
def quiet_optuna():
    optuna.logging.set_verbosity(optuna.logging.ERROR)


def truth(config) -> float:
    return {8: 6.0, 16: 8.0, 32: 7.0}.get(config.cache.block_size, 5.0) + config.scheduler.max_num_seqs / 256


class Scripted:
    """The fake executor, with the conclusion's measurements (negative job numbers) scripted: `fail` of them
    fail (numbered from 1 in the order run), or a signal comes at the `interrupt_at`-th."""

    def __init__(self, fail: set[int] = frozenset(), interrupt_at: int | None = None) -> None:
        self.fake = FakeExecutor(truth, 0.0, 0)
        self.fail, self.interrupt_at, self.made = fail, interrupt_at, 0

    def describe(self, config):
        return self.fake.describe(config)

    def run(self, job, requests, on_progress, on_checkpoint, timeout_s):
        if job.number >= 0:
            return self.fake.run(job, requests, on_progress, on_checkpoint, timeout_s)
        self.made += 1
        if self.made == self.interrupt_at:
            raise Interrupted(15)
        if self.made in self.fail:
            return TrialOutcome(TrialStatus.died, reason="worker process killed by SIGKILL")
        return self.fake.run(job, requests, on_progress, on_checkpoint, timeout_s)

    def close(self):
        pass


# one distinct finalist (trial 1) with the baseline: 2 x 2 selection and 2 x 3 proof measurements, 10 in all
SMALL = {"trials": 6, "finalists": 2, "select_rounds": 2, "proof_rounds": 3}


def said(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "pagetune"]


def test_a_failed_re_measurement_is_made_again_and_says_why(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="pagetune"):
        c, _ = run_fake_study(tmp_path, Scripted(fail={8}), 0, **SMALL)
    assert c.selection.failed == [] and c.proof.failed == []
    assert all(v is not None for vs in c.proof.values.values() for v in vs)  # measured again: nothing missing
    assert said(caplog) == [
        "re-measurement failed: trial 1 on the validation window, round 2: died: worker process killed by SIGKILL; "
        "measuring it again (1 of 2)"]


def test_a_measurement_that_keeps_failing_is_missing_with_its_reason_and_attempts(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="pagetune"):
        c, _ = run_fake_study(tmp_path, Scripted(fail={8, 9, 10}), 0, **SMALL)
    assert c.proof.failed == ["trial 1 on the validation window, round 2: died: worker process killed by SIGKILL "
                              "(3 attempts)"]
    assert c.proof.values["trial 1"][1] is None and len(said(caplog)) == 3
    assert said(caplog)[-1].endswith("killed by SIGKILL")  # the last: no "measuring it again"


def test_a_signal_mid_conclusion_keeps_what_was_measured_and_a_rerun_resumes(tmp_path):
    whole, _ = run_fake_study(tmp_path, Scripted(), 0, **SMALL)
    app, study = run_fake_search(tmp_path, Scripted(), 0, **SMALL)
    windows = (window("search"), window("validation", 40))
    with pytest.raises(Interrupted):  # 4 selection measurements, 2 of the proof, then the signal
        conclude(Scripted(interrupt_at=7), app.measuring, app.validation, study, *windows)
    assert KeptMeasurements(study).count() == 6
    again = Scripted()
    planned: list[int] = []
    c = conclude(again, app.measuring, app.validation, study, *windows, on_plan=planned.append)
    assert again.made == 10 - 6 and KeptMeasurements(study).count() == 10  # only what the signal left
    assert planned == [10, 10]  # what the bar counts: 2 configs x 2 rounds, then the pair x 3 rounds
    assert c.verdict.headline == whole.verdict.headline and c.pick.label == whole.pick.label
    assert c.selection.values == whole.selection.values and c.proof.values == whole.proof.values
    def drawn(probes):  # what a kept probe carries: scale, verdict, each replay's attainment
        return [[(p.scale, p.passed, [r.metrics["slo_attainment"] for r in p.replays]) for p in rnd] for rnd in probes]
    assert {k: drawn(v) for k, v in c.proof.probes.items()} == {k: drawn(v) for k, v in whole.proof.probes.items()}
