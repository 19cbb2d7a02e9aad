"""A tensor-parallel engine simulated from a one-device profile: the work split, the collectives added, the
weights and KV heads of one rank planned."""

from __future__ import annotations

import dataclasses

import pytest

from runtime import EngineConfig, sim_memory
from runtime.sim.parallel import AllReduceCost, ParallelStepModel, estimate, rank_kv_layout, rank_weight_bytes
from runtime.sim.stepmodel import StepShape, Variant
from tests.runtime.sim.sim_factories import TINY_WEIGHT_BYTES, tiny_profile


def test_a_tp2_step_halves_the_work_and_adds_two_allreduces_a_layer_and_the_logits():
    profile = tiny_profile()
    model = ParallelStepModel.of(profile.step_model, 2, AllReduceCost(1e-5, 1e-9, True), profile.info, 4)
    parts = [(Variant(16), StepShape(decode_seqs=8, decode_context=800))]
    assert profile.step_model.predict_tiers(parts) == pytest.approx(4e-3 + 8 * 5e-5 + 800 * 2e-8, rel=1e-12)
    work = 4e-3 + (8 * 5e-5 + 800 * 2e-8) / 2  # the constant is every rank's
    hidden = 1e-5 + 8 * 128 * 4 * 1e-9  # [8 tokens, hidden 128] fp32
    logits = 1e-5 + 8 * 2048 * 4 * 1e-9  # [8 rows, vocabulary 2048]
    assert model.predict_tiers(parts) == pytest.approx(work + 2 * 4 * hidden + logits, rel=1e-12)
    assert model.predict_tiers([]) == profile.step_model.predict_tiers([])


def test_one_rank_holds_the_embedding_whole_and_a_share_of_the_rest():
    info = tiny_profile().info  # 1,115,264 parameters in fp32; the embedding and 9 norms: 263,296
    assert rank_weight_bytes(TINY_WEIGHT_BYTES, info, 1) == TINY_WEIGHT_BYTES
    assert rank_weight_bytes(TINY_WEIGHT_BYTES, info, 2) == 4 * (263_296 + (1_115_264 - 263_296) // 2)
    assert rank_kv_layout(info, 2) == (4, 1, 32)


def test_the_kv_pool_is_planned_per_rank():
    profile = tiny_profile(memory_gb=0.05)
    one = sim_memory(EngineConfig.from_flat("tiny"), profile)[2]
    two = sim_memory(EngineConfig.from_flat("tiny", tensor_parallel_size=2), profile)[2]
    assert (one.weight_bytes, two.weight_bytes) == (TINY_WEIGHT_BYTES, 2_757_120)
    assert one.num_blocks == (one.kv_bytes // (2 * 4 * 16 * 2 * 32 * 4),)  # k and v, 4 layers, 2 KV heads
    assert two.num_blocks == (two.kv_bytes // (2 * 4 * 16 * 1 * 32 * 4),)  # one KV head a rank


def test_an_allreduce_cost_is_the_profiles_measurement_or_the_marked_estimate():
    profile = dataclasses.replace(tiny_profile(), allreduce={"2": (2e-5, 3e-9)})
    assert profile.allreduce_cost(2) == AllReduceCost(2e-5, 3e-9, measured=True)
    assert profile.allreduce_cost(4) == estimate(4) == AllReduceCost(15e-6, 1.5 / 360e9, measured=False)
