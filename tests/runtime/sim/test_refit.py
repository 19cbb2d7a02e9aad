"""A profile refitted with a real engine's steps: judged on held-back real steps before and after."""

from __future__ import annotations

import pytest

from runtime import refit_profile
from tests.runtime.sim.sim_factories import tiny_profile
from tests.runtime.sim.test_stepmodel import EAGER16, TRUE, synthetic_samples


def test_a_refit_on_real_steps_moves_to_their_coefficients():
    wrong = tiny_profile({EAGER16.key: tuple(2 * c for c in TRUE[EAGER16.key])})
    rows = [(s.variant.key, *s.shape, s.seconds) for s in synthetic_samples() if s.variant == EAGER16]
    refit = refit_profile(wrong, rows)
    assert refit.steps == 44 and refit.before.points == refit.after.points == 8
    assert refit.before.median > 0.5  # twice the true times: close to +100%
    assert refit.after.max < 1e-6  # the profile had no samples of its own: the real steps alone decide
    assert refit.profile.coefficients[EAGER16.key] == pytest.approx((*TRUE[EAGER16.key], 0.0), rel=1e-6, abs=1e-15)
    assert len(refit.profile.samples[EAGER16.key]) == 44
    assert refit.profile.notes[-1].startswith("refitted with 44 steps timed on the real engine")
