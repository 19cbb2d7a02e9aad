"""search=vllm: its knobs, `vllm.NAME` knobs carried in the config's metadata, and executor=vllm's baseline (vLLM
with no engine flag but the frozen knobs')."""

from __future__ import annotations

import optuna
import pytest

from tuner.config import ParamConfig, SearchConfig, TunerConfigError, load_app_config
from tuner.measure.job import Hardware
from tuner.search.baseline import baseline_config
from tuner.search.space import KnobMode, SearchSpace
from tuner.vllm import is_vllm_defaults, trial_file, vllm_args

optuna.logging.set_verbosity(optuna.logging.WARNING)
H200 = Hardware("cuda", "NVIDIA H200", 139.8, "1 x NVIDIA H200", "vLLM 0.26.0, vllm serve")


@pytest.fixture
def app(compose, tmp_path):
    traffic = tmp_path / "t.jsonl"
    traffic.write_text("{}\n")
    return lambda *overrides: load_app_config(compose(f"traffic={traffic}", "search=vllm", *overrides))


def test_the_vllm_space_searches_vllms_knobs(app):
    space = SearchSpace.from_config(app().search)
    assert space.searched == (
        "max_num_seqs", "enable_chunked_prefill", "max_num_batched_tokens", "max_num_partial_prefills",
        "long_prefill_token_threshold", "block_size", "gpu_memory_utilization", "enable_prefix_caching",
        "async_scheduling", "max_cudagraph_capture_size")
    assert next(k for k in space.knobs if k.name == "kv_cache_dtype").mode is KnobMode.KEPT


def test_vllm_knobs_ride_in_the_metadata_and_read_back(app):
    a = app()
    space = SearchSpace.from_config(a.search)
    values = {"max_num_seqs": 64, "enable_chunked_prefill": True, "max_num_batched_tokens": 2048,
              "max_num_partial_prefills": 2, "long_prefill_token_threshold": 1024, "block_size": 32,
              "gpu_memory_utilization": 0.9, "enable_prefix_caching": False, "async_scheduling": True,
              "max_cudagraph_capture_size": None}
    config = space.apply(a.runtime, values)
    assert vllm_args(config) == {"max_num_partial_prefills": 2, "long_prefill_token_threshold": 1024,
                                 "async_scheduling": True, "max_cudagraph_capture_size": None}
    assert space.values_of(config) == values
    off = space.apply(a.runtime, {**{k: v for k, v in values.items() if k not in (
        "max_num_batched_tokens", "max_num_partial_prefills", "long_prefill_token_threshold")},
        "enable_chunked_prefill": False})
    assert vllm_args(off) == {"async_scheduling": True, "max_cudagraph_capture_size": None}  # inactive: vLLM's own


def test_any_vllm_name_is_left_to_the_executors_check_but_not_a_dotted_one():
    space = SearchSpace.from_config(SearchConfig({"x": ParamConfig("vllm.stream_interval", "int", low=1, high=8)}))
    assert space.searched == ("x",)
    with pytest.raises(TunerConfigError, match=r"^search\.params\.y\.path: unknown runtime path 'vllm\.a\.b'"):
        SearchSpace.from_config(SearchConfig({"y": ParamConfig("vllm.a.b", "int", low=1, high=8)}))


def test_executor_vllms_baseline_is_vllm_with_no_flag_but_the_frozen_ones(app):
    a = app("executor=vllm", "search.params.block_size.freeze=32", "search.params.async_scheduling.freeze=false")
    space = SearchSpace.from_config(a.search)
    config, source = baseline_config(a, H200, space)
    assert source == "vLLM's own defaults, no engine flag (vLLM 0.26.0, vllm serve)"
    assert is_vllm_defaults(config)
    assert trial_file(config, model="/m", deploy={"load_format": "dummy"}) == {
        "model": "/m", "block-size": 32, "no-async-scheduling": True, "load-format": "dummy"}
    # what Optuna records for it: pagetune's reading of those defaults, the frozen knobs at their values
    assert space.values_of(config)["max_num_seqs"] == 1024
    assert space.values_of(config)["block_size"] == 32
