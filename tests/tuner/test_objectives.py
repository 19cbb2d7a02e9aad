"""The objectives besides goodput (Pareto, capacity) and the quality guardrail for numerics knobs."""

from __future__ import annotations

import pytest
import torch

from runtime import EngineConfig
from runtime.model.loader import load_model
from tests.tuner.cli import run_tuner, study_trials, tuner_args
from tuner.config import QualityConfig
from tuner.quality import compare, run_probe
from tuner.traffic import SAMPLE_TRAFFIC

PROBE = QualityConfig(probe_size=4, probe_max_tokens=8)


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    return load_model("tiny", torch.float32, torch.device("cpu"))


def _config(**knobs) -> EngineConfig:
    return EngineConfig.from_flat("tiny", device="cpu", device_memory_gb=0.05, max_model_len=256, **knobs)


def test_quality_of_the_reference_itself_is_perfect(tiny):
    probe = run_probe(_config(), tiny, PROBE)
    result = compare(probe, run_probe(_config(block_size=4), tiny, PROBE))  # block size does not change numerics
    assert (result.token_agreement, result.mean_kl) == (1.0, 0.0)
    assert result.violation(PROBE) < 0


def test_hard_clipping_breaks_a_strict_guardrail(tiny):
    """Random weights attend almost uniformly, so clipping moves the distributions only a little: a strict
    KL threshold shows the mechanism (the identical config above measures exactly 0)."""
    strict = QualityConfig(probe_size=4, probe_max_tokens=8, max_mean_kl=1e-9)
    result = compare(run_probe(_config(), tiny, strict), run_probe(_config(qk_clip=0.01), tiny, strict))
    assert result.mean_kl > 1e-9
    assert result.violation(strict) == result.mean_kl - 1e-9 > 0


def test_guardrail_makes_a_numerics_trial_infeasible(tmp_path):
    args = tuner_args(tmp_path, SAMPLE_TRAFFIC, "search.params.qk_clip.frozen=false",
                      "search.params.qk_clip.choices=[0.01]", "quality.probe_size=4", "quality.probe_max_tokens=8",
                      "quality.max_mean_kl=1e-9",
                      study="q")
    result = run_tuner(args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    baseline, clipped = study_trials(tmp_path, "q")
    assert baseline.user_attrs["status"] == "ok" and baseline.constraints["quality"] < 0
    assert clipped.params["qk_clip"] == 0.01
    assert clipped.user_attrs["status"] == "infeasible"
    assert clipped.user_attrs["reason"].startswith("quality guardrail: QualityResult(token_agreement=")
    assert clipped.constraints["quality"] > 0


def test_pareto_objective_gives_a_front(tmp_path):
    args = tuner_args(tmp_path, SAMPLE_TRAFFIC, "tuner.objective=pareto", "tuner.pruner=none",
                      "tuner.sampler=nsga2", "tuner.population_size=2", study="p")
    result = run_tuner(args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    trials = [t for t in study_trials(tmp_path, "p") if t.user_attrs.get("status") == "ok"]
    assert all(t.values == [t.user_attrs["metrics"]["output_tok_s"], t.user_attrs["metrics"]["e2e_p99_s"]]
               for t in trials)
    assert (tmp_path / "out-p" / "plots" / "pareto_front.png").stat().st_size > 10_000


def test_capacity_objective_finds_a_rate_scale(tmp_path):
    args = tuner_args(tmp_path, SAMPLE_TRAFFIC, "tuner.objective=capacity", "tuner.capacity_steps=2", study="c")
    result = run_tuner(args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    for t in study_trials(tmp_path, "c"):
        if t.user_attrs.get("status") == "ok":
            # Two replays: x1 then x2 (or x0.5): the result is one of the scales tried, or 0 when none met the SLO.
            assert t.values[0] == t.user_attrs["metrics"]["capacity_scale"] in (0.0, 0.5, 1.0, 2.0)
