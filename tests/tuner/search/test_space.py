"""The YAML search space: modes, narrowing and freezing by override, conditions, inert knobs, apply
(one EngineConfig per trial, inactive knobs at their defaults), the baseline's values."""

from __future__ import annotations

import warnings

import optuna
import pytest
import yaml
from optuna.distributions import IntDistribution

from runtime import EngineConfig, engine_limits, model_info
from tuner.config import CONF_DIR, ParamConfig, SearchConfig, TunerConfigError, WhenConfig, load_app_config
from tuner.search.space import LONG_TIER_MAX_LEN, KnobMode, SearchSpace
from tuner.store.record import BASELINE_ATTR, is_baseline

optuna.logging.set_verbosity(optuna.logging.WARNING)

TIER_VALUES = {"use_tiers": True, "tier_boundary": 1024, "tier_short_block_size": 8,
               "tier_long_block_size": 64, "tier_short_share": 0.3}


@pytest.fixture
def load(compose, tmp_path):
    """load(*overrides) -> (SearchSpace, runtime dict) of the composed conf/."""
    traffic = tmp_path / "t.jsonl"
    traffic.write_text("{}\n")

    def _load(*overrides: str, device: str = "cuda") -> tuple[SearchSpace, EngineConfig]:
        app = load_app_config(compose(f"traffic={traffic}", *overrides))
        return SearchSpace.from_config(app.search, app.runtime.inert_fields(device)), app.runtime
    return _load


def _run(space: SearchSpace, runtime: EngineConfig, n: int, study: optuna.Study | None = None,
         configs: list | None = None) -> list[dict]:
    """n trials of a random-sampler study; returns the values each trial got (each applied)."""
    study = study or optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = []

    def objective(trial: optuna.Trial) -> float:
        values = space.suggest(trial, runtime)
        config = space.apply(runtime, values)
        if configs is not None:
            configs.append(config)
        seen.append(values)
        return 0.0
    study.optimize(objective, n_trials=n)
    return seen


def test_default_space_modes(load):
    space, _ = load()
    modes = {k.name: k.mode for k in space.knobs}
    assert [name for name, mode in modes.items() if mode is not KnobMode.SEARCHED] == ["qk_clip", "kv_cache_dtype"]
    assert modes["qk_clip"] is KnobMode.KEPT and len(modes) == 19


def test_values_of_the_runtime_apply_to_itself(load):
    space, runtime = load()
    base = space.values_of(runtime)
    assert base == {
        "use_tiers": False, "block_size": 16, "max_num_seqs": 256, "enable_chunked_prefill": True,
        "max_num_batched_tokens": None, "enable_prefix_caching": True, "preemption_mode": "recompute",
        "watermark": 0.01, "gpu_memory_utilization": 0.9, "flash_min_len": 1, "split_kv_min_len": 256,
        "pad_multiple": 1,
    }
    assert space.apply(runtime, base) == runtime


def test_baseline_runs_first_even_outside_the_narrowed_space(load):
    # 256 is above the narrowed max_num_seqs, 16 is not a block_size choice, None is no int at all.
    space, runtime = load("search.params.max_num_seqs.high=64", "search.params.block_size.choices=[32,64]")
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    base = space.values_of(runtime)
    space.enqueue_baseline(study, base)
    space.enqueue_baseline(study, base)  # a resumed study does not get a second baseline
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Optuna's "out of range" warning would fail the test
        seen = _run(space, runtime, 3, study)
    first = study.trials[0]
    assert first.state is optuna.trial.TrialState.COMPLETE and is_baseline(first)
    assert seen[0] == base and first.user_attrs[BASELINE_ATTR] == base
    assert "max_num_seqs" not in first.params and "block_size" not in first.params
    assert first.params["pad_multiple"] == 1 and first.params["use_tiers"] is False
    assert [is_baseline(t) for t in study.trials] == [True, False, False]
    assert all(v["max_num_seqs"] <= 64 for v in seen[1:])


def test_narrowing_by_override(load):
    space, runtime = load("search.params.max_num_seqs.high=64", "search.params.max_num_seqs.low=16")
    knob = next(k for k in space.knobs if k.name == "max_num_seqs")
    assert knob.distribution == IntDistribution(16, 64, log=True)
    assert all(16 <= v["max_num_seqs"] <= 64 for v in _run(space, runtime, 20))


def test_frozen_knob_is_fixed_and_not_searched(load):
    space, runtime = load("search.params.block_size.freeze=32", "search.params.use_tiers.freeze=false")
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    seen = _run(space, runtime, 5, study)
    assert [v["block_size"] for v in seen] == [32] * 5
    assert all("block_size" not in t.params and "use_tiers" not in t.params for t in study.trials)
    assert space.apply(runtime, seen[0]).cache.block_size == 32


def test_unfreeze_and_drop_by_override(load):
    space, _ = load("search.params.qk_clip.frozen=false", "~search.params.pad_multiple")
    modes = {k.name: k.mode for k in space.knobs}
    assert modes["qk_clip"] is KnobMode.SEARCHED and "pad_multiple" not in modes


def test_conditional_knobs(load):
    space, runtime = load()
    seen = _run(space, runtime, 40)
    tier_names = {"tier_boundary", "tier_short_block_size", "tier_long_block_size", "tier_short_share"}
    for values in seen:
        assert ("block_size" in values) == (not values["use_tiers"])
        assert (tier_names <= set(values)) == values["use_tiers"]
        assert ("swap_space" in values) == (values["preemption_mode"] == "swap")
        assert ("max_num_batched_tokens" in values) == values["enable_chunked_prefill"]
    assert {v["use_tiers"] for v in seen} == {False, True}


def test_apply_places_values_at_their_paths(load):
    space, runtime = load()
    out = space.apply(runtime, {"block_size": 32, "max_num_seqs": 64, "flash_min_len": 128, "use_tiers": False})
    assert (out.cache.block_size, out.scheduler.max_num_seqs) == (32, 64)
    assert out.kernel.flash_min_len == 128 and out.cache.block_tiers == ()
    assert runtime.cache.block_size == 16  # the input is not modified


@pytest.mark.parametrize(("max_model_len", "long_max_len"), [(None, LONG_TIER_MAX_LEN), (4096, LONG_TIER_MAX_LEN)])
def test_tiers_map_into_block_tiers_and_back(load, max_model_len, long_max_len):
    space, runtime = load(f"runtime.scheduler.max_model_len={max_model_len or 'null'}")
    out = space.apply(runtime, TIER_VALUES)
    assert out.to_dict()["cache"]["block_tiers"] == [{"max_len": 1024, "block_size": 8, "share": 0.3},
                                                     {"max_len": long_max_len, "block_size": 64, "share": 0.7}]
    base = space.values_of(out)
    assert {k: base[k] for k in TIER_VALUES} == TIER_VALUES and "block_size" not in base
    assert space.apply(out, base) == out


def test_apply_errors_name_the_problem(load):
    space, runtime = load()
    with pytest.raises(TunerConfigError, match=r"^unknown knob 'block_sise' \(did you mean 'block_size'\?\)$"):
        space.apply(runtime, {"block_sise": 16})
    with pytest.raises(TunerConfigError) as err:
        space.apply(runtime, {"use_tiers": False, "block_size": 12})
    assert str(err.value).startswith("runtime.cache.block_size: must be a power of two in [1, 256], got 12")
    with pytest.raises(TunerConfigError, match=r"^knob 'block_size' is inactive: it applies only when use_tiers is "
                                               r"False"):
        space.apply(runtime, {**TIER_VALUES, "block_size": 16})


def test_unknown_path_names_the_param(load):
    with pytest.raises(TunerConfigError) as err:
        load("search.params.block_size.path=runtime.cache.blok_size")
    assert str(err.value) == ("search.params.block_size.path: unknown runtime path 'runtime.cache.blok_size' "
                              "(did you mean 'runtime.cache.block_size'?)")


def test_inactive_knobs_take_the_runtime_default_never_the_base_value(load):
    """CUDA graphs in the base config and tiers in the trial: the graphs knob is inactive, so its field goes
    to the runtime's default (null: graphs where they can run), not the base's incompatible true."""
    space, runtime = load("search=gpu", "runtime.kernel.cuda_graphs=true",
                          "runtime.scheduler.max_num_batched_tokens=512", "runtime.cache.swap_space=4.0")
    out = space.apply(runtime, {**TIER_VALUES, "enable_chunked_prefill": False, "preemption_mode": "recompute"})
    assert out.kernel.cuda_graphs is None and out.cache.block_tiers
    assert out.scheduler.max_num_batched_tokens is None  # inactive without chunked prefill: no 512-token budget
    assert out.cache.swap_space == 0.0  # inactive under recompute
    assert space.apply(runtime, {"use_tiers": False}).kernel.cuda_graphs is True  # active: the base value holds


def test_inert_knobs_are_not_searched_on_the_device_that_ignores_them(load):
    cpu, _ = load("search=gpu", device="cpu")
    assert cpu.inert == ("flash_min_len", "split_kv_min_len", "cuda_graphs")
    assert {k.name: k.mode for k in cpu.knobs}["flash_min_len"] is KnobMode.KEPT
    gpu, _ = load("search=gpu", device="cuda")
    assert gpu.inert == () and "cuda_graphs" in gpu.searched


@pytest.mark.parametrize("space_name", sorted(p.stem for p in (CONF_DIR / "search").glob("*.yaml")))
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_500_sampled_configs_of_every_shipped_space_are_valid(load, space_name, device):
    """Before any trial runs: every sampled config builds, and the runtime accepts its limits for the model."""
    declared = yaml.safe_load((CONF_DIR / "search" / f"{space_name}.yaml").read_text())["params"]
    unfreeze = [f"search.params.{k}.frozen=false" for k in ("qk_clip", "kv_cache_dtype") if k in declared]
    space, runtime = load(f"search={space_name}", *unfreeze, device=device)
    configs: list[EngineConfig] = []
    _run(space, runtime, 500, configs=configs)
    info = model_info(runtime.model.name)
    for config in configs:
        engine_limits(config, info)  # raises a ConfigError naming the key for an invalid combination
        assert not (config.kernel.cuda_graphs and config.cache.block_tiers)
    assert len({repr(c) for c in configs}) > 400  # distinct configs, not one repeated


def _space(**params: ParamConfig) -> SearchSpace:
    return SearchSpace.from_config(SearchConfig(params=params))


@pytest.mark.parametrize(("params", "message"), [
    ({"x": ParamConfig(path="runtime.seed", type="int", choices=[1])},
     "search.params.x.choices: int knobs take low/high, not choices"),
    ({"x": ParamConfig(path="runtime.seed", type="int", low=0, high=8, log=True)},
     "search.params.x.low: must be > 0 with log: true"),
    ({"x": ParamConfig(path="runtime.seed", type="int", low=1.5, high=8)},
     "search.params.x.low: must be an integer, got 1.5"),
    ({"x": ParamConfig(path="runtime.seed", type="categorical", choices=[])},
     "search.params.x.choices: a categorical knob needs a non-empty list of choices"),
    ({"x": ParamConfig(path="runtime.seed", type="normal", low=1, high=2)},
     "search.params.x.type: must be categorical, int or float, got 'normal'"),
    ({"x": ParamConfig(path="runtime.seed", choices=[1], when=WhenConfig(param="y", equals=1))},
     "search.params.x.when.param: unknown knob 'y'"),
    ({"a": ParamConfig(path="runtime.seed", choices=[1], when=WhenConfig(param="b", equals=1)),
      "b": ParamConfig(path="runtime.device", choices=["cpu"], when=WhenConfig(param="a", equals=1))},
     "search.params.b.when.param: conditions form a cycle: a -> b -> a"),
    ({"t": ParamConfig(path="tiers.enabled", choices=[True])},
     "search.params: tier knobs need every tier field; missing ['tiers.boundary', 'tiers.short_block_size', "
     "'tiers.long_block_size', 'tiers.short_share']"),
    ({"x": ParamConfig(path="runtime.cache.block_tiers", choices=[1])},
     "search.params.x.path: unknown runtime path 'runtime.cache.block_tiers' (did you mean "
     "'runtime.cache.block_size'?)"),
])
def test_bad_declarations(params, message):
    with pytest.raises(TunerConfigError) as err:
        _space(**params)
    assert str(err.value) == message


def test_numerics_changing_values_are_the_runtime_s_mark(load):
    space, runtime = load("search.params.qk_clip.frozen=false", "search.params.kv_cache_dtype.frozen=false")
    assert not space.apply(runtime, {"qk_clip": None, "kv_cache_dtype": "auto", "block_size": 8,
                                     "use_tiers": False}).changes_numerics
    clipped = space.apply(runtime, {"qk_clip": 30.0, "use_tiers": False})
    assert clipped.changes_numerics and clipped.numerics_neutral().kernel.qk_clip is None
    assert space.apply(runtime, {"kv_cache_dtype": "fp8_e4m3", "use_tiers": False}).changes_numerics
