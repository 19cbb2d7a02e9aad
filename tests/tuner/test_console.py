"""The console's lines: a trial whose pass/fail was not monotone in the rate says so, in req/s."""

from __future__ import annotations

import optuna

from tuner.console import inversion_note, trial_line
from tuner.measure.job import TrialOutcome, TrialStatus

METRICS = {"capacity_rps": 8.0, "capacity_scale": 0.5, "capacity_x_trace": 0.5, "ttft_p99_s": 1.2,
           "tpot_p99_s": 0.05, "probes": 11.0, "replays": 11.0}


def test_a_pass_above_a_fail_is_in_the_trial_line_in_req_s():
    trial = optuna.create_study().ask()
    inverted = {**METRICS, "inversion_pass_scale": 0.6, "inversion_fail_scale": 0.55, "inversions": 2.0}
    line = trial_line(trial, TrialOutcome(TrialStatus.ok), inverted)
    assert line == ("trial 0: capacity 8 req/s = x0.5 the trace's rate; TTFT p99 1.2 s, TPOT p99 0.05 s there "
                    "(11 probes, 11 replays); pass/fail not monotone in the rate: passed at 9.6 req/s above a fail at "
                    "8.8 req/s, capacity settled below every fail []")
    assert inversion_note(METRICS) == ""
    assert inversion_note({**inverted, "capacity_scale": 0.0}).endswith("passed at x0.6 above a fail at x0.55, "
                                                                       "capacity settled below every fail")
