"""A profile refitted with a real engine's steps: judged on held-back real steps before and after."""

from __future__ import annotations

import pytest

from runtime import refit_profile
from runtime.sim.stepmodel import StepShape
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
    assert refit.tier_steps == 0 and refit.profile.tier_s == wrong.tier_s == 0.0  # no tiered step: kept


def test_a_refit_fits_the_cost_of_a_tier_from_the_steps_over_several_tiers():
    profile = tiny_profile({EAGER16.key: TRUE[EAGER16.key]})
    one = [(s.variant.key, *s.shape, s.seconds) for s in synthetic_samples() if s.variant == EAGER16]
    a, b = StepShape(100, 10_000, 4, 400), StepShape(0, 0, 3, 900)
    plain = profile.step_model.predict_tiers([(EAGER16, a), (EAGER16, b)])
    # a step over two tiers as the step log writes it (JSON lists): 12 ms more than one constant and two attentions
    tiered = [[EAGER16.key, *a, plain + 0.012, 7, 1e-4, [[EAGER16.key, *b]]] for _ in range(3)]
    refit = refit_profile(profile, [*one, *tiered])
    assert refit.steps == 44 and refit.tier_steps == 3
    assert refit.profile.tier_s == pytest.approx(0.012, rel=1e-6)
    both = [(EAGER16, a), (EAGER16, b)]
    assert refit.profile.step_model.predict_tiers(both) == pytest.approx(plain + 0.012, rel=1e-6)
    assert refit.profile.notes[-1].endswith("12.00 ms per tier past the first (from 3 steps over several tiers)")
    assert profile.scaled(2.0).tier_s == 0.0 and refit.profile.scaled(2.0).tier_s == pytest.approx(0.024, rel=1e-6)


def test_a_scaled_profile_predicts_every_step_that_many_times_as_long():
    floored = (*TRUE[EAGER16.key], 0.004)  # a floor too: 4 ms
    profile = tiny_profile({EAGER16.key: floored})
    slow = profile.scaled(1.03)
    # 3 ms + 100 x 20 us + 5,000 x 0.4 ns + 2 x 60 us + 300 x 30 ns = 5.131 ms (over the 4 ms floor), then x1.03
    shape = StepShape(prefill_tokens=100, prefill_attention=5000, decode_seqs=2, decode_context=300)
    assert profile.step_model.predict(EAGER16, shape) == pytest.approx(5.131e-3, rel=1e-12)
    assert slow.step_model.predict(EAGER16, shape) == pytest.approx(5.28493e-3, rel=1e-12)
    assert slow.step_model.predict(EAGER16, StepShape()) == pytest.approx(1.03 * 0.004)  # the floor scales
    assert slow.host == profile.host and profile.coefficients[EAGER16.key] == floored  # the original unchanged
    with pytest.raises(ValueError, match="step-time scale must be positive, got 0"):
        profile.scaled(0)
