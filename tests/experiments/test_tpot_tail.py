"""The what-if profiles of `tpot_tail` scale exactly the coefficients they name."""

from pathlib import Path

from experiments.tpot_tail import ATTENTION, TOKENS, scaled
from runtime.sim.profile_file import load_profile

PROFILE = Path(__file__).resolve().parents[2] / "conf" / "profiles" / "h200-qwen2-7b.json"


def test_scaled_multiplies_the_prefill_attention_and_token_coefficients_only() -> None:
    profile = load_profile(PROFILE)
    got = scaled(profile, 0.5, 0.25)
    for key, coef in profile.coefficients.items():
        want = list(coef)
        want[ATTENTION] *= 0.5
        want[TOKENS] *= 0.25
        assert list(got.coefficients[key]) == want
    assert got.weight_bytes == profile.weight_bytes
