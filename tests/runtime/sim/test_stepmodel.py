"""The step-time model: least squares recovers known coefficients; shapes follow the runner's padding rules."""

from __future__ import annotations

import itertools
import re

import pytest

from runtime import EngineConfig
from runtime.kv.manager import TierSpec
from runtime.scheduler import ScheduledSeq
from runtime.sim import StepSample, StepShape, StepTimeModel, Variant, fit, fit_error
from runtime.sim.shape import StepShaper
from runtime.sim.stepmodel import HICCUP, fit_tier_cost, split_held_back
from tests.runtime.kv_factories import make_seq

EAGER16 = Variant(16)
GRAPH16 = Variant(16, "auto", "graph")
PIECEWISE16 = Variant(16, "auto", "piecewise")
EAGER32_FP8 = Variant(32, "fp8_e4m3")
TRUE = {EAGER16.key: (3e-3, 2e-5, 4e-10, 6e-5, 3e-8), EAGER32_FP8.key: (2.5e-3, 1.8e-5, 3e-10, 5e-5, 1.5e-8),
        GRAPH16.key: (1e-3, 0.0, 0.0, 4e-5, 3e-8)}


def synthetic_samples() -> list[StepSample]:
    """Steps timed exactly by TRUE's coefficients over a grid of compositions."""
    model = StepTimeModel(TRUE)
    samples = []
    for variant in (EAGER16, EAGER32_FP8):
        for pt, ctx, ds, dctx in itertools.product((0, 64, 512, 2048), (0, 1024), (0, 8, 64), (128, 2048)):
            shape = StepShape(pt, pt * (ctx + pt), ds, ds * dctx)
            if pt or ds:
                samples.append(StepSample(variant, shape, model.predict(variant, shape)))
    for ds, dctx in itertools.product((1, 8, 32, 256), (64, 512, 4096)):
        shape = StepShape(0, 0, ds, ds * dctx)
        samples.append(StepSample(GRAPH16, shape, model.predict(GRAPH16, shape)))
    return samples


def test_fit_recovers_known_coefficients():
    fitted = fit(synthetic_samples())
    assert sorted(fitted.coefficients) == sorted(TRUE)
    for key, coef in TRUE.items():  # the five, then no floor: exact linear timings need none
        assert fitted.coefficients[key] == pytest.approx((*coef, 0.0), rel=1e-6, abs=1e-15)


FLOORED = {EAGER16.key: (1e-3, 2e-5, 4e-10, 6e-5, 3e-8, 0.016)}  # an eager forward's 16 ms of launches


def test_fit_recovers_a_launch_floor_and_the_work_above_it():
    model = StepTimeModel(FLOORED)
    samples = [StepSample(s.variant, s.shape, model.predict(s.variant, s.shape))
               for s in synthetic_samples() if s.variant == EAGER16]
    on_floor = sum(s.seconds == 0.016 for s in samples)
    assert (len(samples), on_floor) == (44, 30)  # both regimes are there to fit
    fitted = fit(samples)
    assert fitted.coefficients[EAGER16.key] == pytest.approx(FLOORED[EAGER16.key], rel=1e-6, abs=1e-15)
    assert fitted.predict(EAGER16, StepShape(0, 0, 1, 100)) == 0.016  # launch-bound
    assert fitted.predict(EAGER16, StepShape(2048, 2048 * 2048, 0, 0)) == pytest.approx(
        1e-3 + 2e-5 * 2048 + 4e-10 * 2048 * 2048, rel=1e-9)  # work-bound: the launches hide behind it


def test_a_profile_without_a_floor_predicts_as_before():
    assert StepTimeModel(TRUE).predict(EAGER16, StepShape(0, 0, 1, 100)) == pytest.approx(3e-3 + 6e-5 + 3e-6)
    with pytest.raises(ValueError, match="4 coefficients, expected 5 and a floor"):
        StepTimeModel({EAGER16.key: (1.0, 2.0, 3.0, 4.0)})


def test_hiccups_do_not_move_the_fit():
    """A replay's first-use compiles and stalls (here 6 steps of 0.7-1.9 s among 82) are left out of the fit."""
    samples = synthetic_samples()
    hiccups = [s._replace(seconds=t) for s, t in zip(samples[::17], (1.9, 1.37, 1.14, 1.0, 0.88, 0.71), strict=True)]
    fitted = fit([*samples, *hiccups])
    for key, coef in TRUE.items():
        assert fitted.coefficients[key] == pytest.approx((*coef, 0.0), rel=1e-6, abs=1e-15)


def test_held_back_points_are_every_fifth_per_variant_and_their_error_is_zero_for_exact_timings():
    samples = synthetic_samples()
    fit_points, held = split_held_back(samples)
    assert (len(samples), len(fit_points), len(held)) == (100, 82, 18)
    error = fit_error(fit(fit_points), held)
    assert error.points == 18
    assert error.max == pytest.approx(0.0, abs=1e-9)


def test_an_unprofiled_variant_borrows_the_nearest_profiled_one():
    model = StepTimeModel(TRUE)
    assert model.resolve(Variant(8)) == EAGER16
    assert model.resolve(Variant(64, "fp8_e4m3")) == EAGER32_FP8
    assert model.resolve(Variant(32, "auto", "graph")) == GRAPH16
    assert model.resolve(Variant(32)) == EAGER16  # same dtype first, then the closest block size
    # a profile from before piecewise graphs prices a piecewise step as an eager one, not as a decode graph
    assert model.resolve(Variant(16, "auto", "piecewise")) == EAGER16
    with_pieces = StepTimeModel({**TRUE, PIECEWISE16.key: TRUE[EAGER16.key]})
    assert with_pieces.resolve(Variant(32, "auto", "piecewise")) == PIECEWISE16
    assert with_pieces.resolve(Variant(32, "auto", "graph")) == GRAPH16
    assert StepTimeModel({EAGER16.key: TRUE[EAGER16.key], PIECEWISE16.key: TRUE[EAGER16.key]}).resolve(GRAPH16) \
        == PIECEWISE16  # a decode graph borrows the piecewise graphs before the eager forward


def test_a_variant_key_names_its_path():
    assert [Variant.parse(k) for k in ("bs16/auto/eager", "bs32/fp8_e4m3/piecewise", "bs8/auto/graph")] == [
        EAGER16, Variant(32, "fp8_e4m3", "piecewise"), Variant(8, "auto", "graph")]
    assert Variant.parse(PIECEWISE16.key) == PIECEWISE16
    with pytest.raises(ValueError, match=re.escape("expected bs<N>/<kv dtype>/eager|piecewise|graph")):
        Variant.parse("bs16/auto/graphs")


def test_a_step_over_two_tiers_is_their_shapes_summed_at_the_first_tiers_variant():
    model = StepTimeModel(TRUE)
    a, b = StepShape(100, 10_000, 4, 400), StepShape(50, 20_000, 2, 1000)
    c16 = TRUE[EAGER16.key]
    expected = c16[0] + c16[1] * 150 + c16[2] * 30_000 + c16[3] * 6 + c16[4] * 1400  # none of EAGER32_FP8's terms
    assert expected == pytest.approx(model.predict(EAGER16, StepShape(150, 30_000, 6, 1400)), rel=1e-12)
    assert model.predict_tiers([(EAGER16, a), (EAGER32_FP8, b)]) == pytest.approx(expected, rel=1e-12)
    tiered = StepTimeModel(TRUE, tier_s=0.01)  # each tier past the first: 10 ms more
    assert tiered.predict_tiers([(EAGER16, a), (EAGER32_FP8, b)]) == pytest.approx(expected + 0.01, rel=1e-12)
    assert tiered.predict_tiers([(EAGER16, a), (EAGER32_FP8, b), (EAGER16, a)]) == pytest.approx(
        expected + c16[1] * 100 + c16[3] * 4 + c16[2] * 10_000 + c16[4] * 400 + 0.02, rel=1e-12)
    assert tiered.predict(EAGER16, a) == model.predict(EAGER16, a)  # one tier: no tier cost
    with pytest.raises(ValueError, match=r"tier_s: a step's cost per extra tier must be >= 0 seconds, got -0.001"):
        StepTimeModel(TRUE, tier_s=-0.001)


def test_the_tier_cost_is_the_mean_excess_of_steps_over_several_tiers_hiccups_left_out():
    model = StepTimeModel(TRUE, tier_s=0.5)  # the model's own tier cost is not part of the excess
    a, b = StepShape(100, 10_000, 4, 400), StepShape(0, 0, 2, 1000)
    two, three = [(EAGER16, a), (EAGER32_FP8, b)], [(EAGER16, a), (EAGER32_FP8, b), (EAGER32_FP8, b)]
    plain = StepTimeModel(TRUE)
    steps = [(two, plain.predict_tiers(two) + 0.008), (three, plain.predict_tiers(three) + 0.016),
             (two, plain.predict_tiers(two) + 0.008), (two, plain.predict_tiers(two) + 1.0)]  # a hiccup
    assert plain.predict_tiers(two) + 1.0 > HICCUP * (plain.predict_tiers(two) + 0.008)  # the last is a hiccup
    assert fit_tier_cost(model, steps) == pytest.approx(0.008, rel=1e-9)
    skewed = [(two, plain.predict_tiers(two) + extra) for extra in (0.002, 0.002, 0.002, 0.014)]
    assert fit_tier_cost(model, skewed) == pytest.approx(0.005, rel=1e-9)  # the mean: the median would say 2 ms
    assert fit_tier_cost(model, [(two, plain.predict_tiers(two) - 0.002)]) == 0.0  # never below 0
    with pytest.raises(ValueError, match="at least one step over two or more tiers"):
        fit_tier_cost(model, [([(EAGER16, a)], 0.01)])


def _scheduled(*items: tuple[int, int]) -> tuple[ScheduledSeq, ...]:
    """(start, new tokens) per sequence, decodes being one new token at the end of their tokens."""
    out = []
    for i, (start, n) in enumerate(items):
        seq = make_seq(list(range(1, start + n + 1)), i)
        out.append(ScheduledSeq(seq, start, n, True))
    return tuple(out)


def test_shape_pads_an_eager_step_and_fills_a_graph_bucket():
    tiers = (TierSpec(1024, 16, 100, 0),)
    eager = StepShaper(EngineConfig.from_flat("tiny", pad_multiple=8, cuda_graphs=False, device="cuda"), tiers, False)
    step = _scheduled((99, 1), (9, 1), (0, 20))  # 22 tokens, padded to 24: 2 pad rows join the prefill
    assert eager.parts(step) == [(EAGER16, StepShape(prefill_tokens=22, prefill_attention=400, decode_seqs=2,
                                                     decode_context=110))]
    assert eager.parts(_scheduled((99, 1), (9, 1), (5, 1))) == [(EAGER16, StepShape(0, 0, 8, 116))]
    graphs = StepShaper(EngineConfig.from_flat("tiny", cuda_graphs=True, device="cuda", max_num_seqs=64), tiers, True)
    assert graphs.parts(_scheduled((99, 1), (9, 1), (5, 1))) == [(GRAPH16, StepShape(0, 0, 4, 116))]
    assert graphs.parts(step)[0][0] == EAGER16  # a mixed step runs eagerly without piecewise graphs


def test_shape_pads_a_piecewise_step_to_its_bucket_and_runs_a_larger_one_eagerly():
    tiers = (TierSpec(1024, 16, 100, 0),)
    config = EngineConfig.from_flat("tiny", cuda_graphs=True, device="cuda", max_num_seqs=64, pad_multiple=8,
                                    max_cudagraph_capture_size=64)
    shaper = StepShaper(config, tiers, True, piecewise=True)
    step = _scheduled((99, 1), (9, 1), (0, 20))  # 22 tokens, padded to 24 (pad_multiple): the bucket of 24
    assert shaper.parts(step) == [(PIECEWISE16, StepShape(prefill_tokens=22, prefill_attention=400,
                                                          decode_seqs=2, decode_context=110))]
    step = _scheduled((99, 1), (0, 34))  # 35 tokens, 40 padded: the bucket of 48 (13 pad rows)
    assert shaper.parts(step) == [(PIECEWISE16, StepShape(47, 34 * 34, 1, 100))]
    assert shaper.parts(_scheduled((99, 1), (9, 1), (5, 1))) == [(GRAPH16, StepShape(0, 0, 4, 116))]
    big = _scheduled((99, 1), (0, 70))  # 71 tokens, 72 padded: past the largest capture (64), eager
    assert shaper.parts(big) == [(EAGER16, StepShape(71, 70 * 70, 1, 100))]
    two_tiers = StepShaper(config, (TierSpec(32, 16, 100, 0), TierSpec(1024, 16, 100, 1)), False, piecewise=True)
    short, long = make_seq(list(range(1, 11)), 0, tier=0), make_seq(list(range(1, 36)), 1, tier=1)
    step = (ScheduledSeq(short, 9, 1, True), ScheduledSeq(long, 0, 35, True))  # 36 tokens: the bucket of 48
    assert two_tiers.parts(step) == [(PIECEWISE16, StepShape(12, 0, 1, 10)),  # any tiers replay pieces; the
                                     (PIECEWISE16, StepShape(35, 35 * 35, 0, 0))]  # pad rows join the first tier
