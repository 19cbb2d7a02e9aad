"""What a trial's `vllm serve --config FILE` holds: the vllm.yaml writer's keys, the vLLM-only args, the deployment's
args; vLLM's defaults (the baseline) as the model alone."""

from __future__ import annotations

import yaml

from runtime import EngineConfig
from tuner.vllm import (
    as_vllm_defaults,
    is_vllm_defaults,
    option_names,
    serve_keys,
    trial_file,
    vllm_args,
    vllm_yaml,
    with_vllm_args,
)
from tuner.vllm_args import recorded_args

TRIAL = EngineConfig.from_mapping({
    "model": {"name": "llama-3-8b", "dtype": "bfloat16"},
    "cache": {"block_size": 32, "gpu_memory_utilization": 0.8824722757606042, "enable_prefix_caching": False},
    "scheduler": {"max_num_seqs": 128, "max_num_batched_tokens": 4096, "enable_chunked_prefill": True},
    "metadata": with_vllm_args(None, {"async_scheduling": False, "max_num_partial_prefills": 2,
                                      "max_cudagraph_capture_size": None}),
})
DEPLOY = {"load_format": "dummy", "tokenizer": "/models/tok", "max_model_len": 8192}


def test_a_trials_file_is_the_writers_keys_then_its_vllm_args_then_the_deployments():
    assert trial_file(TRIAL, model="/models/llama", deploy=DEPLOY) == {
        "model": "/models/llama", "dtype": "bfloat16", "seed": 0, "block-size": 32, "gpu-memory-utilization": 0.8825,
        "kv-cache-dtype": "auto", "no-enable-prefix-caching": True, "max-num-seqs": 128,
        "max-num-batched-tokens": 4096, "enable-chunked-prefill": True, "scheduling-policy": "fcfs",
        "no-async-scheduling": True, "max-num-partial-prefills": 2,
        "load-format": "dummy", "tokenizer": "/models/tok", "max-model-len": 8192}


def test_every_key_of_a_trials_file_parses_on_vllm_0_26_0():
    args = recorded_args()
    for key, value in trial_file(TRIAL, model="/m", deploy=DEPLOY).items():
        args.check(key, value, key)


def test_vllms_defaults_write_the_model_the_fixed_knobs_and_the_deployment_only():
    fixed = {"runtime.cache.block_size": 16, "runtime.kernel.cuda_graphs": False, "vllm.async_scheduling": True,
             "runtime.kernel.pad_multiple": 8}  # pad_multiple: no vLLM equivalent, nothing written
    baseline = as_vllm_defaults(TRIAL, fixed)
    assert is_vllm_defaults(baseline) and not is_vllm_defaults(TRIAL)
    assert vllm_args(baseline) == {"block_size": 16, "enforce_eager": True, "async_scheduling": True}
    assert trial_file(baseline, model="/m", deploy={"load_format": "dummy"}) == {
        "model": "/m", "block-size": 16, "enforce-eager": True, "async-scheduling": True, "load-format": "dummy"}
    assert yaml.safe_load(yaml.safe_dump(trial_file(baseline, model="/m", deploy={}))) == {
        "model": "/m", "block-size": 16, "enforce-eager": True, "async-scheduling": True}


def test_serve_keys_and_option_names():
    assert serve_keys({"enable_prefix_caching": False, "max_num_seqs": 8, "x": None, "sizes": (1, 2),
                       "gpu_memory_utilization": 0.912345}) == {
        "no-enable-prefix-caching": True, "max-num-seqs": 8, "sizes": [1, 2], "gpu-memory-utilization": 0.9123}
    assert option_names("runtime.scheduler.max_num_seqs") == ("max_num_seqs",)
    assert option_names("runtime.kernel.cuda_graphs") == ("enforce_eager",)
    assert option_names("vllm.async_scheduling") == ("async_scheduling",)
    assert option_names("runtime.kernel.pad_multiple") == ()
    assert option_names("tiers.enabled") == ()


def test_the_export_of_a_vllm_trial_holds_its_vllm_args_and_of_vllms_defaults_only_those():
    export = vllm_yaml(TRIAL.to_dict(), model_path="/m")
    assert export.args == trial_file(TRIAL, model="/m", deploy={})
    assert yaml.safe_load(export.text) == export.args
    baseline = as_vllm_defaults(TRIAL, {"vllm.async_scheduling": True, "runtime.scheduler.max_num_seqs": 64})
    export = vllm_yaml(baseline.to_dict(), model_path="/m")
    assert export.args == {"model": "/m", "max-num-seqs": 64, "async-scheduling": True}
    assert "# vLLM's own defaults: no engine flag but the frozen knobs'\n" in export.text
    assert yaml.safe_load(export.text) == export.args


def test_a_vllm_arg_replaces_the_shared_knobs_key():
    config = EngineConfig.from_mapping({**TRIAL.to_dict(), "metadata": with_vllm_args(None, {
        "enable_prefix_caching": True, "max_num_seqs": 7})})
    args = vllm_yaml(config.to_dict()).args
    assert (args["max-num-seqs"], args["enable-prefix-caching"]) == (7, True) and "no-enable-prefix-caching" not in args
