"""Engine configuration: vLLM-named knobs, nested YAML, errors that name the key."""

from __future__ import annotations

import pytest

from runtime import BlockTier, ConfigError, EngineConfig


def test_flat_knobs_land_in_their_sections():
    cfg = EngineConfig.from_flat("tiny", block_size=8, max_num_seqs=4, qk_clip=30.0, dtype="float32", seed=3)
    assert (cfg.model.name, cfg.model.dtype, cfg.seed) == ("tiny", "float32", 3)
    assert (cfg.cache.block_size, cfg.scheduler.max_num_seqs, cfg.kernel.qk_clip) == (8, 4, 30.0)


def test_round_trip_through_dict_and_yaml(tmp_path):
    tiers = [{"max_len": 128, "block_size": 8, "share": 0.25}, {"max_len": 4096, "block_size": 32, "share": 0.75}]
    cfg = EngineConfig.from_flat("tiny", block_tiers=tiers, swap_space=1, metadata={"trial": 3})
    assert cfg.cache.block_tiers == (BlockTier(128, 8, 0.25), BlockTier(4096, 32, 0.75))
    assert cfg.cache.swap_space == 1.0
    assert EngineConfig.from_mapping(cfg.to_dict()) == cfg
    path = tmp_path / "best.yaml"
    import yaml

    path.write_text(yaml.safe_dump({"runtime": cfg.to_dict()}))
    assert EngineConfig.from_yaml(path) == cfg


def test_last_tier_ends_at_max_model_len():
    cfg = EngineConfig.from_flat("tiny", block_tiers=[{"max_len": 64, "block_size": 4, "share": 0.5},
                                                      {"max_len": 512, "block_size": 16, "share": 0.5}])
    assert [t.max_len for t in cfg.cache.tiers(2048)] == [64, 2048]
    assert [t.max_len for t in cfg.cache.tiers(256)] == [64, 256]
    # A tier that already covers max_model_len is the last one; tiers past it are dropped, shares rescaled.
    assert cfg.cache.tiers(48) == (BlockTier(48, 4, 1.0),)
    assert EngineConfig.from_flat("tiny", block_size=32).cache.tiers(100) == (BlockTier(100, 32, 1.0),)


@pytest.mark.parametrize(("knobs", "message"), [
    ({"blok_size": 16}, "unknown engine argument 'blok_size' (did you mean 'block_size'?)"),
    ({"block_size": 12}, "cache.block_size: must be a power of two in [1, 256], got 12"),
    ({"block_size": 0}, "cache.block_size: must be a power of two in [1, 256], got 0"),
    ({"gpu_memory_utilization": 0}, "cache.gpu_memory_utilization: must be in (0, 1], got 0.0"),
    ({"gpu_memory_utilization": 1.5}, "cache.gpu_memory_utilization: must be in (0, 1], got 1.5"),
    ({"max_num_seqs": "64"}, "scheduler.max_num_seqs: expected an integer, got '64'"),
    ({"enable_prefix_caching": 1}, "cache.enable_prefix_caching: expected true or false, got 1"),
    ({"preemption_mode": "kill"}, "scheduler.preemption_mode: must be 'recompute' or 'swap', got 'kill'"),
    ({"kv_cache_dtype": "int4"}, "cache.kv_cache_dtype: must be one of"),
    ({"prefill_kernel": "fa3"}, "kernel.prefill_kernel: must be triton or fa4, got 'fa3'"),
    ({"block_tiers": [{"max_len": 64, "block_size": 4, "share": 0.4}]}, "cache.block_tiers: shares must sum to 1"),
    ({"block_tiers": [{"max_len": 64, "block_size": 4}]}, "cache.block_tiers[0]: missing"),
])
def test_bad_values_name_the_key(knobs, message):
    with pytest.raises(ConfigError) as err:
        EngineConfig.from_flat("tiny", **knobs)
    assert message in str(err.value)


def test_unknown_nested_key_suggests_the_right_one():
    with pytest.raises(ConfigError, match=r"unknown key 'scheduler.max_num_seq' \(did you mean 'max_num_seqs'\?\)"):
        EngineConfig.from_mapping({"scheduler": {"max_num_seq": 4}})


def test_an_engine_refuses_the_fa4_prefill_kernel_where_it_cannot_run() -> None:
    """On the CPU's torch attention FA4 has nothing to replace: the engine says so at start, in one line."""
    from runtime import LLM

    with pytest.raises(ConfigError, match=r"^kernel.prefill_kernel: fa4 needs Triton attention "
                                          r"\(kernel.attention_backend\)$"):
        LLM(model="tiny", prefill_kernel="fa4")


def test_the_prefill_kernel_is_inert_under_torch_attention() -> None:
    assert "kernel.prefill_kernel" in EngineConfig.from_flat("tiny").inert_fields("cpu")
    assert "kernel.prefill_kernel" not in EngineConfig.from_flat("tiny").inert_fields("cuda")
