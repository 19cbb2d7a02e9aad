"""vLLM 0.26.0's recorded argument list, and the check of keys and values against it."""

from __future__ import annotations

import pytest

from tuner.vllm_args import PINNED_VERSION, VllmArgError, recorded_args

ARGS = recorded_args()


def test_the_recorded_list_is_vllm_0_26_0s_engine_args():
    assert (PINNED_VERSION, ARGS.version, len(ARGS.options)) == ("0.26.0", "0.26.0", 215)
    assert ARGS.options["async_scheduling"].flags == ("--async-scheduling", "--no-async-scheduling")
    assert ARGS.options["cudagraph_capture_sizes"].nargs == "+"
    assert ARGS.options["kv_cache_dtype"].choices == (
        "auto", "bfloat16", "float16", "fp8", "fp8_ds_mla", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_per_token_head",
        "int4_per_token_head", "int8_per_token_head", "nvfp4", "turboquant_3bit_nc", "turboquant_4bit_nc",
        "turboquant_k3v4_nc", "turboquant_k8v4")
    assert "swap_space" not in ARGS.options


@pytest.mark.parametrize(("name", "value"), [
    ("max_num_seqs", 256), ("max-num-batched-tokens", 8192), ("gpu_memory_utilization", 0.9),
    ("gpu_memory_utilization", 1), ("enable_prefix_caching", False), ("no-enable-prefix-caching", True),
    ("kv_cache_dtype", "fp8"), ("async_scheduling", None), ("cudagraph_capture_sizes", [1, 2, 4, 8]),
    ("load_format", "dummy"), ("max_num_partial_prefills", 4), ("long_prefill_token_threshold", 0),
    ("max_cudagraph_capture_size", 256), ("scheduling_policy", "priority"),
])
def test_values_vllm_takes_pass(name, value):
    assert ARGS.check(name, value, "k").dest == name.removeprefix("no-").replace("-", "_")


@pytest.mark.parametrize(("name", "value", "message"), [
    ("async_scheduler", True, "search.params.x: vLLM 0.26.0 has no engine option 'async_scheduler' "
                              "(did you mean 'async_scheduling'?)"),
    ("swap_space", 4, "search.params.x: vLLM 0.26.0 has no engine option 'swap_space'"),
    ("no-max-num-seqs", True, "search.params.x: vLLM 0.26.0 has no engine option 'no-max-num-seqs' "
                              "(did you mean 'max_num_seqs'?)"),
    ("kv_cache_dtype", "fp9", "search.params.x: vLLM 0.26.0's --kv-cache-dtype 'fp9' is not one of its choices "
                              "['auto', 'bfloat16', 'float16', 'fp8', 'fp8_ds_mla', 'fp8_e4m3', 'fp8_e5m2', 'fp8_inc', "
                              "'fp8_per_token_head', 'int4_per_token_head', 'int8_per_token_head', 'nvfp4', "
                              "'turboquant_3bit_nc', 'turboquant_4bit_nc', 'turboquant_k3v4_nc', 'turboquant_k8v4']"),
    ("max_num_seqs", 1.5, "search.params.x: vLLM 0.26.0's --max-num-seqs takes an int, got 1.5"),
    ("max_num_seqs", True, "search.params.x: vLLM 0.26.0's --max-num-seqs takes an int, got True"),
    ("gpu_memory_utilization", "0.9", "search.params.x: vLLM 0.26.0's --gpu-memory-utilization takes a number, "
                                      "got '0.9'"),
    ("async_scheduling", 1, "search.params.x: vLLM 0.26.0's --async-scheduling a flag takes true or false"),
    ("cudagraph_capture_sizes", 8, "search.params.x: vLLM 0.26.0's --cudagraph-capture-sizes takes a non-empty list"),
    ("cudagraph_capture_sizes", [8, "x"], "search.params.x: vLLM 0.26.0's --cudagraph-capture-sizes takes an int, "
                                          "got 'x'"),
])
def test_an_unknown_key_or_value_names_the_key_and_the_version(name, value, message):
    with pytest.raises(VllmArgError) as e:
        ARGS.check(name, value, "search.params.x")
    assert str(e.value) == message


def test_a_version_without_a_recorded_list_says_so():
    with pytest.raises(VllmArgError, match=r"^no recorded argument list for vLLM 9\.9\.9 at .*-9\.9\.9-args\.json$"):
        recorded_args("9.9.9")
