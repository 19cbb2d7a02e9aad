"""Study plots: real in-memory Optuna studies in, non-empty PNGs of the expected size out, never a raise."""

from __future__ import annotations

import struct
from pathlib import Path

import optuna
import pytest

from tuner.results import plots

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _png_size(path: Path) -> tuple[int, int, int]:
    """(width, height, bytes) read from the file's IHDR chunk."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    width, height = struct.unpack(">II", data[16:24])
    return width, height, len(data)


def _goodput(trial: optuna.Trial) -> float:
    x = trial.suggest_float("x", 0.0, 2.0)
    block_size = trial.suggest_int("cache.block_size", 8, 32, step=8)
    trial.set_constraint("oom", 1.0 if x > 1.8 else -1.0)  # feasible when <= 0
    return 3.0 * x - block_size / 32


def _study(n_trials: int, directions: list[str], objective) -> optuna.Study:
    study = optuna.create_study(study_name=f"s{n_trials}-{len(directions)}", directions=directions,
                                sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(objective, n_trials=n_trials)
    return study


@pytest.fixture(scope="module")
def single() -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return _study(12, ["maximize"], _goodput)


@pytest.fixture(scope="module")
def multi() -> optuna.Study:
    def throughput_vs_latency(trial: optuna.Trial) -> tuple[float, float]:
        x, y = trial.suggest_float("x", 0.0, 1.0), trial.suggest_float("y", 0.0, 1.0)
        return 10.0 * x, 100.0 * (x * x + y)

    return _study(15, ["maximize", "minimize"], throughput_vs_latency)


def test_optimization_history_single_and_multi_objective(single, multi, tmp_path):
    one = plots.optimization_history(single, tmp_path / "h1.png", ["goodput (req/s)"])
    two = plots.optimization_history(multi, tmp_path / "h2.png")
    assert one == tmp_path / "h1.png"
    w1, h1, n1 = _png_size(one)
    w2, h2, n2 = _png_size(two)
    assert (w1, h1, w2, h2) == (700, 320, 700, 640)
    assert n1 > 10_000 and n2 > 20_000


def test_optimization_history_shows_pruned_trials_at_the_value_they_stopped_at(tmp_path):
    def pruned_when_odd(trial: optuna.Trial) -> float:
        trial.report(float(trial.number), 0)
        if trial.number % 2:
            raise optuna.TrialPruned()
        return float(trial.number) + 0.5

    study = _study(5, ["maximize"], pruned_when_odd)
    assert plots.pruned_points(study) == [(1, 1.0), (3, 3.0)]
    width, height, size = _png_size(plots.optimization_history(study, tmp_path / "h.png"))
    assert (width, height) == (700, 320) and size > 10_000


def test_pareto_front_of_a_multi_objective_study(multi, tmp_path):
    path = plots.pareto_front(multi, tmp_path / "nested" / "pareto.png", ["throughput (req/s)", "p99 (ms)"])
    width, height, size = _png_size(path)
    assert (width, height) == (640, 480) and size > 20_000


def test_pareto_front_of_a_single_objective_study_says_so(single, tmp_path):
    width, height, size = _png_size(plots.pareto_front(single, tmp_path / "p.png"))
    assert (width, height) == (640, 320) and 3_000 < size < 20_000


def test_param_importances_ranks_the_params(single, tmp_path):
    width, height, size = _png_size(plots.param_importances(single, tmp_path / "imp.png"))
    assert (width, height) == (700, 190) and size > 10_000


@pytest.mark.parametrize("n_trials", [0, 2, 9])
def test_param_importances_with_too_few_trials_writes_none(n_trials, tmp_path):
    """Below 10 completed trials (and 2 per searched parameter) an importance ranking is noise: no image at all
    (an empty one reads as broken); the report says why."""
    study = _study(n_trials, ["maximize"], _goodput)
    assert plots.param_importances(study, tmp_path / "imp.png") is None
    assert not (tmp_path / "imp.png").exists()
    assert plots.importances_needed(study)[0] == n_trials


def test_param_importances_never_raises_on_a_param_that_never_varies(tmp_path):
    study = optuna.create_study(study_name="constant", direction="maximize")
    for _ in range(10):
        study.enqueue_trial({"x": 1.0, "cache.block_size": 16})
    study.optimize(_goodput, n_trials=10)
    width, height, size = _png_size(plots.param_importances(study, tmp_path / "imp.png"))
    assert (width, height) == (640, 320) and 3_000 < size < 20_000


def test_latency_cdf_best_vs_baseline(tmp_path):
    best = {"ttft": [0.05 * i for i in range(1, 101)], "tpot": [0.02] * 50 + [0.03] * 50}
    baseline = {"ttft": [0.1 * i for i in range(1, 101)] + [float("nan")], "tpot": []}
    path = plots.latency_cdf(best, baseline, tmp_path / "cdf.png", "at the trace's own rate, 4.1 req/s")
    width, height, size = _png_size(path)
    assert (width, height) == (1200, 420) and size > 20_000


def test_latency_cdf_without_latencies_writes_a_notice(tmp_path):
    width, height, _ = _png_size(plots.latency_cdf({}, {}, tmp_path / "cdf.png"))
    assert (width, height) == (640, 320)


def _probe(rate: float, attainments: list[float]):
    from tuner.measure.job import Probe, ReplaySummary

    replays = tuple(ReplaySummary(rate, a >= 0.99, False, {"slo_attainment": a}) for a in attainments)
    return Probe(rate, replays, sum(r.passed for r in replays) * 2 > len(replays))


def test_capacity_curve_of_baseline_and_pick(tmp_path):
    baseline = [(_probe(4.0, [1.0]), _probe(8.0, [0.9, 0.95]), _probe(6.0, [0.99, 1.0])),
                (_probe(5.0, [1.0]), _probe(7.0, [0.97]))]
    pick = [(_probe(6.0, [1.0]), _probe(9.0, [0.992, 0.98, 1.0]))]
    width, height, size = _png_size(plots.capacity_curve({"baseline": baseline, "pick": pick}, 0.99,
                                                         tmp_path / "capacity.png"))
    assert (width, height) == (700, 420) and size > 20_000
    empty = plots.capacity_curve({"baseline": []}, 0.99, tmp_path / "none.png")
    assert _png_size(empty)[:2] == (640, 320)


def test_objective_labels_carry_units():
    assert plots.objective_label("capacity") == ["capacity (req/s)"]
    assert plots.objective_label("pareto") == ["output throughput (tok/s)", "E2E latency p99 (s)"]
