"""The console's lines: a trial whose pass/fail was not monotone in the rate says so, in req/s; where the output
is not a terminal, no bar, and the conclusion's progress is a line per measurement with its ETA."""

from __future__ import annotations

import logging

import optuna
from tqdm.auto import tqdm

from tuner.console import Console, LogProgress, inversion_note, trial_line
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


def test_a_log_gets_no_bar_and_a_line_per_measurement_with_its_eta(caplog):
    now = [100.0]
    console = Console(interactive=False)
    console.start_trials(10, 0, 50)
    console.progress(1, 1, 1.0, 5, 50)  # no replay bar to move
    console.end_trials()
    bar = console.bar(0, "re-measuring finalists and baseline")
    assert isinstance(bar, LogProgress)
    bar = LogProgress(0, "re-measuring finalists and baseline", clock=lambda: now[0])
    Console.retotal(bar, 18)
    with caplog.at_level(logging.INFO, logger="pagetune"):
        for step_s in (44.4, 20.0, 3600.0):
            now[0] += step_s
            bar.update(1)
        bar.n = 17
        bar.update(1)
    assert [r.getMessage() for r in caplog.records] == [
        "re-measuring finalists and baseline: 1 of 18 (44 s; about 12 min 35 s left)",
        "re-measuring finalists and baseline: 2 of 18 (1 min 04 s; about 8 min 35 s left)",
        "re-measuring finalists and baseline: 3 of 18 (1 h 01 min; about 5 h 05 min left)",
        "re-measuring finalists and baseline: 18 of 18 (1 h 01 min)",
    ]


def test_a_terminal_gets_bars():
    console = Console(interactive=True)
    bar = console.bar(3, "re-measuring finalists and baseline")
    try:
        assert isinstance(bar, tqdm)
    finally:
        bar.close()


def test_a_log_gets_a_line_for_each_long_replay_said_when_the_next_begins_or_the_trial_ends(caplog):
    now = [0.0]
    console = Console(interactive=False, clock=lambda: now[0])
    trial = optuna.create_study().ask()
    with caplog.at_level(logging.INFO, logger="pagetune"):
        for probe, scale, seconds, done in ((1, 1.0, 75.0, 120), (2, 2.0, 4.0, 120), (3, 1.5, 41.0, 37)):
            for finished in range(1, done + 1):  # a request finishes every `seconds / done` seconds
                console.progress(0, probe, scale, finished, 120)
                now[0] += seconds / done
            now[0] += 5.0  # between replays
        console.trial_end(trial, TrialOutcome(TrialStatus.pruned, reason="fails the SLO"), {})
    assert [r.getMessage() for r in caplog.records if r.name == "pagetune"] == [
        "trial 0 replay 1 at x1: 120 of 120 requests finished over 1 min 14 s",  # from its first finished request
        "trial 0 replay 3 at x1.5: 37 of 120 requests finished over 40 s",  # the 4 s replay said nothing
        "trial 0: PRUNED: fails the SLO []",
    ]
