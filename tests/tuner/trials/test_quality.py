"""The quality guardrail for numerics knobs: the candidate against itself with those knobs neutral."""

from __future__ import annotations

import pytest
import torch

from runtime import EngineConfig, WeightCache
from tuner.config import QualityConfig
from tuner.trials.quality import compare, run_probe

PROBE = QualityConfig(probe_size=4, probe_max_tokens=8)


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    return WeightCache().get(_config())[0]


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
    clipped = _config(qk_clip=0.01)
    result = compare(run_probe(clipped.numerics_neutral(), tiny, strict), run_probe(clipped, tiny, strict))
    assert result.mean_kl > 1e-9
    assert result.violation(strict) == result.mean_kl - 1e-9 > 0
