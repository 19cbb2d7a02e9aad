"""Config fuzzing: every bad key or value ends in ConfigError / TunerConfigError naming the dotted key.

Hypothesis draws one bad value (wrong type, out of range, NaN, infinity, a number too large for a
float, a bad enum name) or one unknown key, puts it into an otherwise valid config, and checks the
error type and that the message starts with the key. Mappings go through
`EngineConfig.from_mapping` and `tuner.config.load_app_config`; a few overrides go through Hydra's
compose (slow: 0.2 s each), where the error is Hydra's ConfigCompositionException naming the key.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.config import ConfigError, EngineConfig
from tuner.config import CONF_DIR, TunerConfigError, load_app_config
from tuner.search.space import SearchSpace

# Example counts, quoted in docs/RELIABILITY.md.
ENGINE_EXAMPLES = 1000
APP_EXAMPLES = 1000
UNKNOWN_KEY_EXAMPLES = 150
TIER_EXAMPLES = 200
KNOB_EXAMPLES = 300

HUGE = st.sampled_from([10**400, -(10**400)])  # a YAML integer no float can hold
TEXT = st.text(max_size=6)
JUNK = st.one_of(TEXT, st.lists(st.integers(), max_size=2), st.dictionaries(TEXT, st.integers(), max_size=2))
ANY = st.one_of(JUNK, st.integers(), st.floats(), st.booleans(), st.none())


def not_int(nullable: bool = False) -> st.SearchStrategy:
    return st.one_of(JUNK, st.floats(), st.booleans(), *([] if nullable else [st.none()]))


def not_number(nullable: bool = False) -> st.SearchStrategy:
    return st.one_of(JUNK, st.booleans(), *([] if nullable else [st.none()]))


def not_bool(nullable: bool = False) -> st.SearchStrategy:
    return st.one_of(JUNK, st.integers(), st.floats(), *([] if nullable else [st.none()]))


def not_str() -> st.SearchStrategy:
    return st.one_of(st.integers(), st.floats(), st.booleans(), st.lists(TEXT, max_size=2), st.none())


def ints_below(low: int) -> st.SearchStrategy:
    return st.one_of(st.integers(max_value=low - 1), st.just(-(10**400)), not_int())


def numbers_outside(ok) -> st.SearchStrategy:
    """Floats (NaN and infinities included) and ints for which `ok` is false, huge ints, wrong types."""
    bad = st.one_of(st.floats(), st.integers()).filter(lambda x: not ok(x))
    return st.one_of(bad, HUGE, not_number())


def optional_numbers_outside(ok) -> st.SearchStrategy:
    return st.one_of(st.floats().filter(lambda x: not ok(x)), HUGE, not_number(nullable=True))


def names_outside(allowed) -> st.SearchStrategy:
    return st.one_of(TEXT.filter(lambda s: s not in allowed), not_str())


def _pow2_le_256(n: Any) -> bool:
    return isinstance(n, int) and 0 < n <= 256 and n & (n - 1) == 0


def _finite(x: float) -> bool:
    return math.isfinite(x)


# Dotted runtime key -> bad values for it.
ENGINE_BAD: dict[str, st.SearchStrategy] = {
    "model.name": st.one_of(st.just(""), not_str()),
    "model.dtype": names_outside(("auto", "float32", "bfloat16", "float16")),
    "model.seed": not_int(),
    "cache.block_size": st.one_of(st.integers().filter(lambda n: not _pow2_le_256(n)), HUGE, not_int()),
    "cache.gpu_memory_utilization": numbers_outside(lambda x: 0 < x <= 1),
    "cache.device_memory_gb": optional_numbers_outside(lambda x: _finite(x) and x > 0),
    "cache.swap_space": numbers_outside(lambda x: _finite(x) and x >= 0),
    "cache.kv_cache_dtype": names_outside(("auto", "float32", "bfloat16", "float16", "fp8_e4m3")),
    "cache.enable_prefix_caching": not_bool(),
    "cache.watermark": numbers_outside(lambda x: 0 <= x < 0.5),
    "cache.num_gpu_blocks_override": st.one_of(st.integers(max_value=0), not_int(nullable=True)),
    "scheduler.max_num_seqs": ints_below(1),
    "scheduler.max_num_batched_tokens": st.one_of(st.integers(max_value=0), not_int(nullable=True)),
    "scheduler.enable_chunked_prefill": not_bool(),
    "scheduler.max_model_len": st.one_of(st.integers(max_value=0), not_int(nullable=True)),
    "scheduler.preemption_mode": names_outside(("recompute", "swap")),
    "scheduler.policy": names_outside(("fcfs", "priority")),
    "kernel.attention_backend": names_outside(("auto", "torch", "triton")),
    "kernel.flash_min_len": ints_below(1),
    "kernel.split_kv_min_len": ints_below(1),
    "kernel.qk_clip": optional_numbers_outside(lambda x: x > 0),
    "kernel.pad_multiple": ints_below(1),
    "kernel.cuda_graphs": not_bool(nullable=True),
    "kernel.sampler_half_topk": not_bool(),
    "kernel.skinny_gemm": not_bool(),
    "device": st.one_of(TEXT.filter(lambda s: not re.fullmatch(r"auto|cpu(:\d+)?|cuda(:\d+)?", s)),
                        st.sampled_from(["cuda:x", "cpu:", "cuda:-1", "tpu", "cuda:0 "]), not_str()),
    "seed": not_int(),
    "debug_integrity": not_bool(),
    "metadata": st.one_of(st.integers(), TEXT, st.lists(st.integers(), min_size=1, max_size=2)),
}

SECTIONS = {"model", "cache", "scheduler", "kernel"}


def nested(dotted: str, value: Any) -> dict[str, Any]:
    """{"a": {"b": value}} from "a.b"."""
    head, _, rest = dotted.partition(".")
    return {head: nested(rest, value) if rest else value}


def merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def engine_case() -> st.SearchStrategy:
    return st.sampled_from(sorted(ENGINE_BAD)).flatmap(lambda key: st.tuples(st.just(key), ENGINE_BAD[key]))


@settings(max_examples=ENGINE_EXAMPLES, deadline=None)
@given(case=engine_case())
def test_bad_engine_value_is_a_config_error_naming_the_key(case):
    key, value = case
    with pytest.raises(ConfigError) as err:
        EngineConfig.from_mapping(merged(EngineConfig().to_dict(), nested(key, value)))
    assert str(err.value).startswith(f"{key}: "), str(err.value)


@settings(max_examples=UNKNOWN_KEY_EXAMPLES, deadline=None)
@given(section=st.sampled_from(["", *sorted(SECTIONS)]), name=st.text(min_size=1, max_size=12), value=ANY)
def test_unknown_engine_key_is_named(section, name, value):
    known = {f.split(".")[-1] for f in ENGINE_BAD if f.startswith(section)} | ({"block_tiers"} | SECTIONS)
    if name in known:
        return
    dotted = f"{section}.{name}" if section else name
    data = {section: {name: value}} if section else {name: value}
    with pytest.raises(ConfigError) as err:
        EngineConfig.from_mapping(data)
    assert str(err.value).startswith(f"unknown key '{dotted}'")


@settings(max_examples=50, deadline=None)
@given(section=st.sampled_from(sorted(SECTIONS)), value=st.one_of(st.integers(), TEXT, st.lists(st.integers()),
                                                                st.none(), st.booleans()))
def test_engine_section_that_is_not_a_mapping_is_named(section, value):
    with pytest.raises(ConfigError, match=rf"^{section}: expected a mapping"):
        EngineConfig.from_mapping({section: value})


TIER = st.fixed_dictionaries({}, optional={"max_len": st.one_of(st.integers(-4, 600), ANY),
                                           "block_size": st.one_of(st.sampled_from([0, 1, 3, 8, 16, 512]), ANY),
                                           "share": st.one_of(st.floats(-0.5, 1.5), st.sampled_from([0.25, 0.5]), ANY),
                                           "extra": ANY})


@settings(max_examples=TIER_EXAMPLES, deadline=None)
@given(tiers=st.one_of(st.lists(TIER, max_size=3), ANY))
def test_block_tiers_are_valid_or_a_named_error(tiers):
    """Tier shares must sum to 1, max_len strictly increase, block sizes be powers of two."""
    try:
        config = EngineConfig.from_mapping({"cache": {"block_tiers": tiers}})
    except ConfigError as err:
        assert re.match(r"^(cache\.block_tiers\b|unknown key 'cache\.block_tiers\[\d\]\.extra')", str(err)), str(err)
        return
    built = config.cache.block_tiers
    assert built == () or math.isclose(sum(t.share for t in built), 1.0, abs_tol=1e-6)
    assert [t.max_len for t in built] == sorted({t.max_len for t in built})
    assert all(_pow2_le_256(t.block_size) and t.max_len > 0 for t in built)


# ---- the tuner's AppConfig, from mappings -------------------------------------------------------

APP_BAD: dict[str, st.SearchStrategy] = {
    "traffic_format": names_outside(("auto", "native", "mooncake", "azure", "openai")),
    "slo.ttft_s": numbers_outside(lambda x: x > 0),
    "slo.tpot_s": numbers_outside(lambda x: x > 0),
    "slo.e2e_s": optional_numbers_outside(lambda x: x > 0),
    "slo.attainment": numbers_outside(lambda x: 0 < x <= 1),
    "tuner.sampler": names_outside(("tpe", "gp", "nsga2", "random", "qmc")),
    "tuner.seed": not_int(nullable=True),
    "tuner.n_startup_trials": ints_below(0),
    "tuner.population_size": ints_below(2),
    "tuner.pruner": names_outside(("incumbent", "none")),
    "tuner.n_trials": ints_below(1),
    "tuner.study_name": st.one_of(st.just(""), not_str().filter(lambda v: v is not None)),
    "tuner.resume": names_outside(("auto", "force")),
    "tuner.objective": names_outside(("goodput", "pareto", "capacity")),
    "tuner.capacity_tol": numbers_outside(lambda x: 0.001 <= x <= 1),
    "tuner.repeats": ints_below(1),
    "tuner.finalists": ints_below(1),
    "tuner.warmup_requests": ints_below(0),
    "tuner.edge_checks": ints_below(0),
    "tuner.trial_timeout_s": numbers_outside(lambda x: x > 0),
    "tuner.timeout_s": optional_numbers_outside(lambda x: x > 0),
    "tuner.worker_threads": st.one_of(st.integers(max_value=0), not_int(nullable=True)),
    "tuner.worker_memory_gb": optional_numbers_outside(lambda x: _finite(x) and x > 0),
    "tuner.fidelity": names_outside(("single", "sim+real")),
    "executor.kind": names_outside(("auto", "real", "sim")),
    "storage.backend": names_outside(("rdb", "journal")),
    "storage.url": st.one_of(TEXT.filter(lambda s: "://" not in s), not_str()),
    "storage.heartbeat_interval_s": ints_below(1),
    "storage.grace_period_s": st.one_of(st.integers(max_value=60), not_int()),  # must exceed the 60 s beat
    "storage.max_retry": ints_below(0),
    "tracking.uri": st.one_of(st.just(""), not_str()),
    "tracking.experiment": st.one_of(st.just(""), not_str()),
    "tracking.on_unreachable": names_outside(("fail", "continue")),
    "replay.time_scale": numbers_outside(lambda x: x > 0),
    "replay.start_s": numbers_outside(lambda x: x >= 0),
    "replay.duration_s": optional_numbers_outside(lambda x: x > 0),
    "replay.max_requests": st.one_of(st.integers(max_value=0), not_int(nullable=True)),
    "replay.sample": optional_numbers_outside(lambda x: 0 < x <= 1),
    "replay.seed": not_int(),
    "replay.on_error": names_outside(("raise", "skip")),
    "replay.long_prompts": names_outside(("reject", "truncate")),
    "replay.max_rejected_share": numbers_outside(lambda x: 0 <= x <= 1),
    "replay.min_window_s": numbers_outside(lambda x: 0 <= x < math.inf),
    "validation.holdout_fraction": numbers_outside(lambda x: 0 <= x < 1),
    "validation.select_rounds": ints_below(1),
    "validation.proof_rounds": ints_below(2),
    "baseline": names_outside(("vllm", "runtime")),
    "quality.min_token_agreement": numbers_outside(lambda x: 0 <= x <= 1),
    "quality.max_mean_kl": numbers_outside(lambda x: x >= 0),
    "quality.probe_size": ints_below(1),
    "quality.probe_max_tokens": ints_below(1),
    **{f"runtime.{key}": values for key, values in ENGINE_BAD.items()},
}


@pytest.fixture(scope="module")
def traffic(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("fuzz") / "logs.jsonl"
    path.write_text('{"timestamp": 0.0, "prompt_tokens": 8, "output_tokens": 4}\n')
    return path


def app_case() -> st.SearchStrategy:
    return st.sampled_from(sorted(APP_BAD)).flatmap(lambda key: st.tuples(st.just(key), APP_BAD[key]))


@settings(max_examples=APP_EXAMPLES, deadline=None)
@given(case=app_case())
def test_bad_app_value_is_a_tuner_config_error_naming_the_key(traffic, case):
    key, value = case
    with pytest.raises(TunerConfigError) as err:
        load_app_config({"traffic": str(traffic), **nested(key, value)})
    assert str(err.value).startswith(f"{key}: "), str(err.value)


APP_SECTIONS = ("slo", "tuner", "storage", "tracking", "replay", "validation", "quality", "search", "executor")


@settings(max_examples=UNKNOWN_KEY_EXAMPLES, deadline=None)
@given(section=st.sampled_from(["", *APP_SECTIONS]),
       name=st.text(min_size=1, max_size=12).filter(lambda s: "." not in s), value=ANY)
def test_unknown_app_key_is_named(traffic, section, name, value):
    known = {k.split(".")[-1] for k in APP_BAD if k.startswith(f"{section}.")} | {"traffic", "runtime", "params",
                                                                                   *APP_SECTIONS, "traffic_format"}
    if name in known:
        return
    dotted = f"{section}.{name}" if section else name
    with pytest.raises(TunerConfigError) as err:
        load_app_config({"traffic": str(traffic), **nested(dotted, value)} if section else
                        {"traffic": str(traffic), name: value})
    assert str(err.value).startswith(f"unknown key '{dotted}'"), str(err.value)


@pytest.mark.parametrize(("data", "message"), [
    ({}, "traffic is not set: pass the request log, e.g. `python -m tuner +traffic=logs.jsonl`"),
    ({"traffic": None}, "traffic is not set: pass the request log, e.g. `python -m tuner +traffic=logs.jsonl`"),
    ({"traffic": "/nonexistent/logs.jsonl"}, "traffic: no such file: /nonexistent/logs.jsonl"),
    ({"traffic": 5}, "traffic: no such file: 5"),
])
def test_traffic_key_errors(data, message):
    with pytest.raises(TunerConfigError) as err:
        load_app_config(data)
    assert str(err.value) == message


# ---- search-space declarations ------------------------------------------------------------------

EDGES = [0, 0.25, 1, 2, 1e-300, 1e300, math.inf, -math.inf, math.nan]
BOUND = st.one_of(st.none(), st.sampled_from(EDGES), st.floats(), st.integers(-3, 300), HUGE, TEXT, st.booleans())
KNOB = st.fixed_dictionaries(
    {"path": st.sampled_from(["runtime.cache.watermark", "runtime.scheduler.max_num_seqs", "runtime.cache.nope",
                              "tiers.boundary"])},
    optional={"type": st.sampled_from(["int", "float", "categorical", "uniform"]) | not_str(),
              "low": BOUND, "high": BOUND, "step": BOUND, "log": st.booleans() | not_bool(),
              "choices": st.one_of(st.lists(st.integers(0, 9), max_size=3), TEXT, st.lists(JUNK, max_size=2)),
              "freeze": ANY, "frozen": st.booleans() | not_bool(),
              "when": st.one_of(st.fixed_dictionaries({"param": st.sampled_from(["k", "other"]), "equals": ANY}),
                                ANY)})


@settings(max_examples=KNOB_EXAMPLES, deadline=None)
@given(knob=KNOB)
def test_knob_declaration_is_valid_or_a_named_error(traffic, knob):
    """A knob in `search.params` builds a distribution, or fails naming search.params.k; never anything else."""
    try:
        app = load_app_config({"traffic": str(traffic), "search": {"params": {"k": knob}}})
        space = SearchSpace.from_config(app.search)
    except TunerConfigError as err:
        assert re.match(r"^(unknown key ')?search\.params(\.k\b|:)", str(err)), str(err)
        return
    (built,) = space.knobs
    assert built.path == knob["path"]


# ---- through Hydra's compose --------------------------------------------------------------------

def _compose(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides))


@pytest.mark.parametrize("override", [
    "runtime.cache.block_size=big", "runtime.scheduler.max_num_seqs=8.5", "runtime.cache.block_tiers=5",
    "tuner.n_trials=1e400", "tuner.worker_threads=true", "replay.on_error=ignore", "runtime.metadata=5",
    "search.params.block_size.choices=abc", "runtime.cache.blok_size=8",
])
def test_bad_override_fails_at_compose_naming_the_key(override):
    with pytest.raises(ConfigCompositionException) as err:
        _compose(override)
    assert override.split("=")[0] in str(err.value), str(err.value)


@pytest.mark.parametrize(("override", "key"), [
    ("runtime.cache.gpu_memory_utilization=0", "runtime.cache.gpu_memory_utilization"),
    ("runtime.cache.gpu_memory_utilization=1.5", "runtime.cache.gpu_memory_utilization"),
    ("runtime.cache.block_size=0", "runtime.cache.block_size"),
    ("runtime.cache.block_size=24", "runtime.cache.block_size"),
    ("runtime.scheduler.max_num_seqs=-1", "runtime.scheduler.max_num_seqs"),
    ("runtime.cache.swap_space=inf", "runtime.cache.swap_space"),
    ("runtime.cache.block_tiers=[{max_len:32,block_size:4,share:0.5}]", "runtime.cache.block_tiers"),
    ("runtime.scheduler.preemption_mode=swapp", "runtime.scheduler.preemption_mode"),
    ("slo.attainment=nan", "slo.attainment"),
    ("+runtime.cache._target_=os.system", "unknown key 'runtime.cache._target_'"),
])
def test_bad_value_that_composes_fails_at_load_naming_the_key(traffic, override, key):
    with pytest.raises(TunerConfigError) as err:
        load_app_config(_compose(f"traffic={traffic}", override))
    assert str(err.value).startswith(key), str(err.value)
