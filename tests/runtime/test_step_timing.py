"""`runtime.step_timing`: compositions timed on a real (tiny, CPU) engine, over one tier or two."""

from __future__ import annotations

import pytest

from runtime.config import EngineConfig
from runtime.engine import LLMEngine
from runtime.sim.stepmodel import StepShape, Variant
from runtime.step_timing import Composition, StepTimer, tier_grid

V16 = Variant(16)


@pytest.fixture(scope="module")
def two_tiers() -> StepTimer:
    config = EngineConfig.from_flat(
        "tiny", max_model_len=1024, max_num_seqs=16, max_num_batched_tokens=256, device="cpu", device_memory_gb=1.0,
        enable_prefix_caching=False, block_tiers=[{"max_len": 256, "block_size": 16, "share": 0.5},
                                                  {"max_len": 1024, "block_size": 16, "share": 0.5}])
    return StepTimer(LLMEngine(config), repeats=1)


def test_a_composition_spans_the_tiers_its_lengths_take(two_tiers):
    step = two_tiers.time_step(Composition(decodes=(128, 128, 512, 512)))
    assert step.parts == ((V16, StepShape(0, 0, 2, 256)), (V16, StepShape(0, 0, 2, 1024)))
    assert step.seconds > 0
    step = two_tiers.time_step(Composition(decodes=(128,) * 8, chunks=((256, 64),)))  # the chunk's sequence: 320 long
    assert step.parts == ((V16, StepShape(0, 0, 8, 1024)), (V16, StepShape(64, 64 * 320, 0, 0)))
    assert all(pool.num_free == pool.num_blocks for pool in two_tiers.engine.kv.pools)  # every block given back


def test_a_one_tier_sample_is_refused_for_a_step_over_two(two_tiers):
    (sample,) = two_tiers.time(Composition(decodes=(100, 200)))  # both up to 256: the first tier
    assert (sample.variant, sample.shape) == (V16, StepShape(0, 0, 2, 300)) and sample.seconds > 0
    with pytest.raises(ValueError, match="spans 2 tiers; time it with time_step"):
        two_tiers.time(Composition(decodes=(100, 600)))


def test_fits_pool_needs_a_tier_for_every_length(two_tiers):
    assert two_tiers.fits_pool(Composition(decodes=(1024,)))
    assert not two_tiers.fits_pool(Composition(decodes=(1025,)))


def test_the_tier_grid_puts_half_of_each_step_in_each_tier():
    short, long = (128,), (512,)
    assert tier_grid(True, 256, 1024, 16, 256) == [
        Composition(short + long), Composition(short * 4 + long * 4), Composition(short * 8 + long * 8),
        Composition(short * 8, ((256, 16),)), Composition(long * 8, ((0, 16),)),
        Composition(short * 8, ((256, 64),)), Composition(long * 8, ((0, 64),))]  # 16 decodes and a chunk: 17 seqs
