"""experiments.study_cost: a kept measurement's probes timed as a GPU would replay them, read back from a real
Optuna study where the conclusion's own writer (`KeptMeasurements`) kept them."""

from __future__ import annotations

import optuna
import pytest

from experiments.study_cost import main, measurement_s, replay_s
from tuner.measure.job import Probe, ReplaySummary
from tuner.results.kept import Kept, KeptMeasurements


def test_a_pass_takes_the_windows_arrivals_at_its_rate_and_a_fail_a_share_of_that():
    assert replay_s(True, 2.0, 101, 0.3) == 50.0  # 100 gaps at 2 req/s
    assert replay_s(False, 2.0, 101, 0.3) == pytest.approx(15.0)
    probes = [[4.0, False, [0.5]], [2.0, True, [1.0]], [2.5, True, [1.0, 0.99]]]
    assert measurement_s(probes, 101, 0.5) == pytest.approx(12.5 + 50.0 + 2 * 40.0)


def _probe(scale: float, passed: bool, replays: int = 1) -> Probe:
    return Probe(scale, tuple(ReplaySummary(scale, passed, False, {"slo_attainment": 1.0 if passed else 0.5})
                              for _ in range(replays)), passed)


def test_it_reads_a_studys_kept_measurements(tmp_path, capsys):
    storage = f"sqlite:///{tmp_path / 's.db'}"
    study = optuna.create_study(study_name="s", storage=storage, direction="maximize")
    kept = KeptMeasurements(study)
    kept.put("search", 0, 0, Kept(2.0, (_probe(4.0, False), _probe(2.0, True)), False))
    kept.put("validation", 0, 0, Kept(1.0, (_probe(1.0, True, 2),), False))
    main(["--storage", storage, "--study", "s", "--search", "101", "--held", "51", "--start-s", "10"])
    lines = capsys.readouterr().out.splitlines()
    # search: 0.3 x 25 s + 50 s + 10 s; validation: 2 x 50 s + 10 s
    assert lines == ["search/0/0                2.000 req/s  2 probes (1 passing replays)  ~   68 s",
                     "validation/0/0            1.000 req/s  1 probes (2 passing replays)  ~  110 s",
                     "conclusion: ~178 s (3.0 min) of replays and starts"]
