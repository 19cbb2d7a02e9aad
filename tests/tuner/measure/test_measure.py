"""The measurement on replays with a known answer: majority probes, the capacity bracket and bisection,
the checkpoint, saturation, and the fixed-rate objectives."""

from __future__ import annotations

import itertools
import math

import pytest

from tuner.config import ObjectiveName, SloConfig
from tuner.measure.job import MeasurePlan, Probe, ReplaySummary
from tuner.measure.measure import MAX_SCALE, Fan, measure, probe

SLO = SloConfig()


def summary(scale: float, passed: bool, decisive: bool = False, **metrics: float) -> ReplaySummary:
    return ReplaySummary(scale, passed, decisive, {"slo_attainment": 1.0 if passed else 0.5, "busy_s": 1.0, **metrics})


def threshold(capacity: float, calls: list[float] | None = None):
    """A noiseless replay: it passes at scales up to `capacity`, never decisively."""
    def replay(scale: float) -> ReplaySummary:
        if calls is not None:
            calls.append(scale)
        return summary(scale, scale <= capacity)
    return replay


def plan(**changes) -> MeasurePlan:
    return MeasurePlan(**{"objective": ObjectiveName.capacity, "slo": SLO, "repeats": 1, **changes})


def test_probe_stops_at_the_majority_or_at_a_decisive_first_replay():
    votes = iter([True, False, True, True])
    counted: list[float] = []

    def replay(scale):
        counted.append(scale)
        return summary(scale, next(votes))

    assert probe(replay, 2.0, 3).passed and len(counted) == 3  # pass, fail, pass: 2 of 3
    decisive = probe(lambda s: summary(s, False, decisive=True), 2.0, 3)
    assert (decisive.passed, len(decisive.replays)) == (False, 1)
    agree = probe(lambda s: summary(s, True), 2.0, 5)
    assert (agree.passed, len(agree.replays)) == (True, 3)  # 3 of 5 is a majority: no fourth replay
    assert probe(lambda s: summary(s, False), 1.0, 2).passed is False  # a 1:1 tie would fail; 0:2 fails


@pytest.mark.parametrize(("capacity", "start"), [(3.3, 1.0), (0.37, 1.0), (7.9, 7.0), (5.0, 9.0), (1.0, 1.0)])
def test_capacity_is_bracketed_then_bisected_to_the_tolerance(capacity, start):
    calls: list[float] = []
    measurement, stopped = measure(threshold(capacity, calls), plan(start_scale=start, tol=0.05), span_s=100.0)
    lower, upper = measurement.values[0], measurement.metrics["capacity_upper_scale"]
    assert stopped is None and not measurement.saturated
    assert lower <= capacity < upper and upper / lower <= 1.05
    assert calls[0] == start and measurement.metrics["probes"] == len(calls) == measurement.metrics["replays"]
    assert len(calls) <= 12


def test_brackets_step_finely_from_an_estimate_and_coarsely_without():
    fine: list[float] = []
    measure(threshold(10.5, fine), plan(start_scale=10.0, first_step=1.2), span_s=100.0)
    assert fine[:2] == [10.0, 12.0]  # up by 1.2 from the incumbent's capacity, then bisect
    coarse: list[float] = []
    measure(threshold(10.5, coarse), plan(start_scale=1.0, first_step=2.0), span_s=100.0)
    assert coarse[:4] == [1.0, 2.0, 8.0, 128.0]  # x2, then the step squares: x4, x16


def test_checkpoint_sees_the_first_whole_probe_and_may_stop_there():
    calls: list[float] = []
    seen: list[Probe] = []

    def stop(p: Probe) -> bool:
        seen.append(p)
        return False

    measurement, stopped = measure(threshold(4.0, calls), plan(start_scale=6.0, checkpoint=True, repeats=3), 100.0,
                                   stop)
    assert calls == [6.0, 6.0] and len(seen) == 1 and stopped is seen[0]  # two failing replays decided it
    assert (stopped.scale, stopped.passed) == (6.0, False) and measurement.metrics["probes"] == 1.0
    going: list[Probe] = []
    _, none = measure(threshold(4.0), plan(start_scale=6.0, checkpoint=True), 100.0, lambda p: going.append(p) or True)
    assert none is None and len(going) == 1  # asked once, at the first probe only
    untouched: list[Probe] = []
    measure(threshold(4.0), plan(start_scale=6.0), 100.0, lambda p: untouched.append(p) or True)
    assert untouched == []  # no checkpoint in the plan: never asked


def test_a_window_that_meets_the_slo_at_any_rate_is_saturated():
    measurement, _ = measure(threshold(math.inf), plan(), span_s=100.0)
    assert measurement.saturated and measurement.values[0] == MAX_SCALE
    short, _ = measure(threshold(math.inf), plan(), span_s=0.5)  # 0.5 s / 1 ms: at most x500 differs
    assert short.saturated and short.values[0] == 500.0


def test_a_config_that_never_meets_the_slo_has_capacity_zero():
    measurement, _ = measure(threshold(0.0), plan(), span_s=100.0)
    assert measurement.values[0] == 0.0 and not measurement.saturated
    assert measurement.metrics["capacity_upper_scale"] == pytest.approx(1e-3)


def test_goodput_and_pareto_take_medians_of_every_repeat_at_the_given_rate():
    goodputs = itertools.cycle([3.0, 1.0, 2.0])

    def replay(scale):
        return summary(scale, True, goodput_rps=next(goodputs), output_tok_s=10.0 * scale, e2e_p99_s=0.5)

    good, _ = measure(replay, plan(objective=ObjectiveName.goodput, repeats=3), span_s=10.0)
    assert good.values == (2.0,) and good.metrics["replays"] == 3.0 and good.metrics["goodput_rps"] == 2.0
    front, _ = measure(replay, plan(objective=ObjectiveName.pareto, repeats=2), span_s=10.0)
    assert front.values == (10.0, 0.5)


def test_no_probe_replays_the_window_faster_than_it_spans_min_window_s():
    calls: list[float] = []
    measurement, _ = measure(threshold(math.inf, calls), plan(min_window_s=60.0), span_s=300.0)
    assert measurement.saturated and measurement.values[0] == 5.0  # 300 s / 60 s: x5 at most, a lower bound
    assert max(calls) == 5.0
    capped, _ = measure(threshold(math.inf), plan(start_scale=9.0, min_window_s=60.0), span_s=300.0)
    assert capped.metrics["probes"] == 1.0 and capped.values[0] == 5.0  # a start above the bound starts at it
    inside, _ = measure(threshold(3.3), plan(min_window_s=60.0), span_s=300.0)
    assert not inside.saturated and 3.3 / 1.05 <= inside.values[0] <= 3.3


def bands(*edges: tuple[float, float]):
    """A replay that passes only inside the given (low, high] bands of scale: pass/fail not monotone."""
    calls: list[float] = []

    def replay(scale: float) -> ReplaySummary:
        calls.append(scale)
        return summary(scale, any(low < scale <= high for low, high in edges))
    return replay, calls


def test_a_fail_below_the_edge_is_found_and_the_edge_is_settled_below_it():
    # passes up to x1.8, fails in (1.8, 1.9], passes again in (1.9, 2.0]: the bisection meets the upper edge
    replay, calls = bands((0.0, 1.8), (1.9, 2.0))
    measurement, _ = measure(replay, plan(start_scale=1.6, first_step=1.2, tol=0.05), span_s=100.0)
    settled = measurement.values[0]
    assert 1.8 / 1.05 < settled <= 1.8 < measurement.metrics["capacity_upper_scale"] <= 1.9
    assert 1.9 < measurement.metrics["inversion_pass_scale"] <= 2.0  # a pass above ...
    assert 1.8 < measurement.metrics["inversion_fail_scale"] <= 1.9  # ... a fail, reported
    assert calls[-2:] == [settled / 1.05, settled / 1.05**2]  # the settled edge checked by two probes below it


def test_a_monotone_edge_costs_two_checks_and_reports_no_inversion():
    calls: list[float] = []
    measurement, _ = measure(threshold(3.3, calls), plan(start_scale=3.0, first_step=1.2), span_s=100.0)
    assert "inversions" not in measurement.metrics
    lower = measurement.values[0]
    assert calls[-2:] == [lower / 1.05, lower / 1.05**2]


def here(batches: list[list[float]]) -> Fan:
    """Two probes at a time, run in this process; each batch's scales (4 decimals) noted."""
    def run(task, count):
        out = [task(i) for i in range(count)]
        batches.append([round(p.scale, 4) for p in out])
        return out
    return Fan(2, run)


def test_side_by_side_probes_bracket_bisect_and_check_in_fewer_rounds():
    batches: list[list[float]] = []
    calls: list[float] = []
    measurement, _ = measure(threshold(0.297, calls), plan(start_scale=1.0, tol=0.05), 100.0, None, here(batches))
    assert batches == [[0.5, 0.25],  # the bracket's next two steps down (x2, and x2 again: at most x2 down)
                       [0.315, 0.3969], [0.27, 0.2916],  # the bracket cut in three, then again
                       [0.2777, 0.2645]]  # both edge checks at once
    assert len(calls) == 10 and calls[0] == 1.0  # 5 rounds (9 probes one at a time, 9 rounds)
    lower, upper = measurement.values[0], measurement.metrics["capacity_upper_scale"]
    assert lower <= 0.297 < upper and upper / lower <= 1.05 and "inversions" not in measurement.metrics
    assert batches[-1] == [round(lower / 1.05, 4), round(lower / 1.05**2, 4)]


def test_edge_checks_is_the_number_of_probes_below_the_edge():
    path: list[float] = []
    trusted, _ = measure(threshold(3.3, path), plan(start_scale=3.0, first_step=1.2, edge_checks=0), span_s=100.0)
    for checks in (1, 3):
        calls: list[float] = []
        measurement, _ = measure(threshold(3.3, calls), plan(start_scale=3.0, first_step=1.2, edge_checks=checks),
                                 span_s=100.0)
        lower = measurement.values[0]
        assert lower == trusted.values[0] and calls[:len(path)] == path  # the same path, then the checks
        assert [round(c / lower, 6) for c in calls[len(path):]] == [round(1.05 ** -k, 6) for k in range(1, checks + 1)]


def test_the_studys_edge_checks_reach_every_measurement_plan():
    from tuner.config import Measuring, TunerConfig
    from tuner.measure.plan import plan_for
    measuring = Measuring(TunerConfig(edge_checks=1), SLO, 60.0)
    assert plan_for(measuring, None, repeats=1, checkpoint=False).edge_checks == 1
    assert plan_for(measuring, 2.0, repeats=3, checkpoint=True).edge_checks == 1


def test_a_bracket_downwards_steps_at_most_x2_so_no_pass_lies_far_below_the_capacity():
    # a passing replay takes the window's span over the rate: squared steps (x2, x4, x16) would first pass at
    # x0.125 here, replaying the window 2.4 times slower than at the capacity
    calls: list[float] = []
    measurement, _ = measure(threshold(0.3, calls), plan(start_scale=1.0), span_s=100.0)
    assert [round(c, 4) for c in calls[:3]] == [1.0, 0.5, 0.25]
    assert min(calls) >= 0.3 / 2 and 0.3 / 1.05 <= measurement.values[0] <= 0.3
    far: list[float] = []
    measure(threshold(0.01, far), plan(start_scale=1.0), span_s=100.0)
    assert [round(c, 4) for c in far[:8]] == [1.0, 0.5, 0.25, 0.125, 0.0625, 0.0312, 0.0156, 0.0078]
    # a finer first step squares until it reaches x2
    fine: list[float] = []
    measure(threshold(0.5, fine), plan(start_scale=1.0, first_step=1.2), span_s=100.0)
    steps = [round(a / b, 4) for a, b in itertools.pairwise(fine[:4])]
    assert steps == [1.2, 1.44, 2.0]


def test_a_batch_is_read_as_one_at_a_time_would_read_it():
    # passes up to x1.8, fails in (1.8, 1.9], passes in (1.9, 2.0]: the lowest fail is the edge, the pass above it
    # an inversion, whichever order the batch ran in
    replay, _ = bands((0.0, 1.8), (1.9, 2.0))
    batches: list[list[float]] = []
    measurement, _ = measure(replay, plan(start_scale=1.6, first_step=1.2, tol=0.05), 100.0, None, here(batches))
    assert 1.8 / 1.05 < measurement.values[0] <= 1.8 < measurement.metrics["capacity_upper_scale"] <= 1.9
    assert 1.9 < measurement.metrics["inversion_pass_scale"] <= 2.0 and measurement.metrics["inversions"] >= 1


def test_the_checkpoint_runs_beside_the_brackets_first_step_which_a_stopped_trial_drops():
    batches: list[list[float]] = []
    measured, stopped = measure(threshold(1.07), plan(start_scale=0.9, first_step=1.2, checkpoint=True), 100.0,
                                lambda p: True, here(batches))
    assert stopped is None and batches == [[0.9, 1.08], [0.9564, 1.0163], [0.9978, 0.9503]]  # 4 rounds, not 6
    assert (measured.values[0], measured.metrics["capacity_upper_scale"]) == (pytest.approx(1.047676), 1.08)
    batches.clear()
    pruned, stopped = measure(threshold(0.5), plan(start_scale=0.9, first_step=1.2, checkpoint=True), 100.0,
                              lambda p: False, here(batches))
    assert batches == [[0.9, 1.08]] and stopped is not None and stopped.scale == 0.9
    assert [p.scale for p in pruned.probes] == [0.9] and pruned.values == (0.0,)
