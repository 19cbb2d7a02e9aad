"""vllm.yaml holds only VLLM_VERSION's options and reads back, through vLLM's config-file rules, as the tuned
values (false booleans and enforce-eager included); serve_defaults per device class."""

from __future__ import annotations

import argparse
import copy
import json
from typing import Any

import pytest
import yaml

from runtime import EngineConfig
from tuner.vllm import (
    OPTIONS,
    VLLM_VERSION,
    DeviceClass,
    OptionKind,
    VllmOption,
    device_class,
    serve_defaults,
    vllm_yaml,
)
from tuner.vllm.export import _entry

TUNED = EngineConfig.from_mapping({
    "model": {"name": "llama-3-8b", "dtype": "bfloat16"},
    "cache": {"block_size": 32, "gpu_memory_utilization": 0.8824722757606042, "kv_cache_dtype": "fp8_e4m3",
              "enable_prefix_caching": False, "watermark": 0.02},
    "scheduler": {"max_num_seqs": 128, "max_num_batched_tokens": 4096, "max_model_len": 8192,
                  "enable_chunked_prefill": False, "policy": "priority"},
    "kernel": {"qk_clip": 30.0, "cuda_graphs": False},
    "seed": 7,
}).to_dict()
TIERS = [{"max_len": 1024, "block_size": 8, "share": 0.3}, {"max_len": 8192, "block_size": 64, "share": 0.7}]
# What `vllm serve` should end up with for TUNED (argparse dests).
TUNED_PARSED = {
    "model": "llama-3-8b", "dtype": "bfloat16", "seed": 7, "max_model_len": 8192, "enforce_eager": True,
    "block_size": 32, "gpu_memory_utilization": 0.8825, "kv_cache_dtype": "fp8_e4m3",
    "num_gpu_blocks_override": None, "enable_prefix_caching": False, "max_num_batched_tokens": 4096,
    "max_num_seqs": 128, "scheduling_policy": "priority", "enable_chunked_prefill": False,
    "tensor_parallel_size": 1,  # vLLM's default: one device writes no tensor-parallel-size
}
SERVE_DEFAULTS_CUDA = {"cache.block_size": 16, "cache.gpu_memory_utilization": 0.92,
                       "cache.enable_prefix_caching": True, "scheduler.enable_chunked_prefill": True,
                       "kernel.cuda_graphs": True}


def runtime(**sections: dict[str, Any]) -> dict[str, Any]:
    """TUNED with `sections` merged in (`cache={"block_tiers": TIERS}`)."""
    config = copy.deepcopy(TUNED)
    for name, values in sections.items():
        config[name].update(values)
    return config


# --- vLLM's loader, as recorded in docs/VLLM.md ---------------------------------------------------------------

def config_argv(text: str, owned: set[str] | None) -> list[str]:
    """YAML -> argv as FlexibleArgumentParser.load_config_file does (vllm/utils/argparse_utils.py:654-671).

    `owned`: option strings of the parser expanding the file, consulted for `key: false` since 0.28 (for
    `vllm serve` the top-level parser, which owns no engine flag); None: older loaders, which drop every false.
    """
    argv: list[str] = []
    for key, value in yaml.safe_load(text).items():
        if isinstance(value, bool):
            argv += [f"--{key}"] if value else [f"--no-{key}"] if f"--no-{key}" in (owned or set()) else []
        elif isinstance(value, list):
            argv += [f"--{key}", *map(str, value)] if value else []
        elif isinstance(value, dict):
            argv += [f"--{key}", json.dumps(value)]
        else:
            argv += [f"--{key}", str(value)]
    return argv


def options_parser() -> argparse.ArgumentParser:
    """The engine flags of OPTIONS, as argparse parses them."""
    parser = argparse.ArgumentParser(allow_abbrev=False)
    for option in OPTIONS.values():
        if option.kind is OptionKind.VALUE:
            parser.add_argument(f"--{option.name}", type=option.value_type, default=option.default,
                                choices=option.choices or None)
        elif option.kind is OptionKind.BOOL_OPTIONAL:
            parser.add_argument(f"--{option.name}", action=argparse.BooleanOptionalAction, default=option.default)
        else:
            parser.add_argument(f"--{option.name}", action="store_true")
    return parser


LOADERS = {  # name -> option strings consulted for `key: false`
    "vllm serve --config (top-level parser)": lambda parser: set(),
    "api_server --config (one parser, >= 0.28)": lambda parser: set(parser._option_string_actions),
    "before 0.28 (drops false)": lambda parser: None,
}


def load_like_vllm(text: str, loader: str) -> dict[str, Any]:
    parser = options_parser()
    return vars(parser.parse_args(config_argv(text, LOADERS[loader](parser))))


# --- facts ----------------------------------------------------------------------------------------------------

def test_version_and_options_table():
    assert VLLM_VERSION == "0.33.0"
    assert list(OPTIONS) == [
        "model", "dtype", "seed", "max-model-len", "enforce-eager", "block-size", "gpu-memory-utilization",
        "kv-cache-dtype", "num-gpu-blocks-override", "enable-prefix-caching", "max-num-batched-tokens",
        "max-num-seqs", "scheduling-policy", "enable-chunked-prefill", "tensor-parallel-size"]
    assert "swap-space" not in OPTIONS  # removed from vLLM before 0.24
    flags = {name: o.kind for name, o in OPTIONS.items() if o.kind is not OptionKind.VALUE}
    assert flags == {"enforce-eager": OptionKind.BOOL_OPTIONAL, "enable-prefix-caching": OptionKind.BOOL_OPTIONAL,
                     "enable-chunked-prefill": OptionKind.BOOL_OPTIONAL}
    defaults = {name: o.default for name, o in OPTIONS.items()}
    assert defaults == {
        "model": "Qwen/Qwen3-0.6B", "dtype": "auto", "seed": 0, "max-model-len": None, "enforce-eager": False,
        "block-size": None, "gpu-memory-utilization": 0.92, "kv-cache-dtype": "auto",
        "num-gpu-blocks-override": None, "enable-prefix-caching": None, "max-num-batched-tokens": None,
        "max-num-seqs": None, "scheduling-policy": "fcfs", "enable-chunked-prefill": None,
        "tensor-parallel-size": 1}
    assert OPTIONS["block-size"].source == "vllm/engine/arg_utils.py:1387"
    assert {"fp8_e4m3", "float16", "bfloat16"} <= set(OPTIONS["kv-cache-dtype"].choices)
    assert "float32" not in OPTIONS["kv-cache-dtype"].choices


def test_a_plain_false_is_lost_by_vllm_serve_which_is_why_no_key_is_written():
    naive = "enable-prefix-caching: false\n"
    assert load_like_vllm(naive, "vllm serve --config (top-level parser)")["enable_prefix_caching"] is None
    assert load_like_vllm(naive, "api_server --config (one parser, >= 0.28)")["enable_prefix_caching"] is False
    assert load_like_vllm("no-enable-prefix-caching: true\n", "before 0.28 (drops false)")[
        "enable_prefix_caching"] is False


# --- the export -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("loader", list(LOADERS))
def test_every_loader_reads_back_the_tuned_values(loader):
    assert load_like_vllm(vllm_yaml(TUNED).text, loader) == TUNED_PARSED


def test_file_text():
    text = vllm_yaml(TUNED).text
    assert text.split("\n\n")[0] == """\
# vllm serve --config vllm.yaml   (target: vLLM 0.33.0; every key is one of its options)
# From pagetune; floats rounded to 4 significant digits.
# NOT MEASURED ON vLLM: pagetune measured this config on its own runtime; measure this file on vLLM before you \
rely on its figures.
# Measured knobs vLLM 0.33.0 cannot express, and what this file holds instead:
#   cache.watermark: 0.02 -> not written: vLLM 0.33.0 admits requests by its own free-block rule
#   kernel.qk_clip: 30.0 -> not written: vLLM 0.33.0 has no such option
# pagetune preset 'llama-3-8b' has random weights: replace it with the checkpoint (Hugging Face id or folder) \
vLLM should serve
model: llama-3-8b
dtype: bfloat16
seed: 7
block-size: 32
gpu-memory-utilization: 0.8825
kv-cache-dtype: fp8_e4m3
# enable-prefix-caching: false, as its negative flag (a loader may drop `false`)
no-enable-prefix-caching: true
max-num-seqs: 128
max-num-batched-tokens: 4096
# enable-chunked-prefill: false, as its negative flag (a loader may drop `false`)
no-enable-chunked-prefill: true
max-model-len: 8192
scheduling-policy: priority
# kernel.cuda_graphs: false -> enforce-eager: true
enforce-eager: true"""
    assert "\n#   cache.watermark: 0.02\n" in text and "\n#   kernel.qk_clip: 30.0\n" in text


@pytest.mark.parametrize("config", [
    TUNED, runtime(cache={"block_tiers": TIERS}), runtime(kernel={"cuda_graphs": None}),
    runtime(kernel={"cuda_graphs": True}), EngineConfig().to_dict(),
], ids=["tuned", "tiers", "graphs-null", "graphs-on", "defaults"])
def test_every_key_is_a_vllm_option_and_the_file_loads_as_args(config):
    export = vllm_yaml(config)
    for key in export.args:
        assert key in OPTIONS or OPTIONS[key.removeprefix("no-")].kind is OptionKind.BOOL_OPTIONAL, key
    assert yaml.safe_load(export.text) == export.args
    assert export.args["block-size"] > 0  # always written


@pytest.mark.parametrize(("graphs", "written", "enforce_eager"), [
    (None, {}, False), (True, {"no-enforce-eager": True}, False), (False, {"enforce-eager": True}, True),
])
def test_enforce_eager_follows_cuda_graphs(graphs, written, enforce_eager):
    export = vllm_yaml(runtime(kernel={"cuda_graphs": graphs}))
    assert {k: v for k, v in export.args.items() if k.endswith("enforce-eager")} == written
    assert load_like_vllm(export.text, "vllm serve --config (top-level parser)")["enforce_eager"] is enforce_eager
    assert f"# kernel.cuda_graphs: {json.dumps(graphs)} -> enforce-eager" in export.text


def test_tiers_give_the_block_size_of_the_largest_share_and_are_listed():
    export = vllm_yaml(runtime(cache={"block_tiers": TIERS}))
    assert export.args["block-size"] == 64
    assert ("# pagetune block tiers: {max_len: 1024, block_size: 8, share: 0.3}, "
            "{max_len: 8192, block_size: 64, share: 0.7}.\n"
            "# vLLM takes one block size: the one of the tier with the largest KV share.\nblock-size: 64\n"
            ) in export.text
    assert export.unmapped["cache.block_tiers"] == TIERS


def test_the_header_names_each_measured_knob_vllm_cannot_express_and_what_it_holds_instead():
    tiers = [{"max_len": 1024, "block_size": 8, "share": 0.5}, {"max_len": 8192, "block_size": 32, "share": 0.5}]
    export = vllm_yaml(runtime(cache={"block_tiers": tiers, "swap_space": 2.456519136895919},
                               scheduler={"preemption_mode": "swap"}, kernel={"pad_multiple": 16}))
    assert export.unexpressed == (
        'cache.block_tiers: [{"max_len": 1024, "block_size": 8, "share": 0.5}, {"max_len": 8192, "block_size": 32, '
        '"share": 0.5}] -> block-size: 8 (the tier with the largest KV share; the first of equal ones)',
        "cache.swap_space: 2.457 -> not written: vLLM 0.33.0 has no swap space option; its engine preempts by "
        "recompute",
        "cache.watermark: 0.02 -> not written: vLLM 0.33.0 admits requests by its own free-block rule",
        'scheduler.preemption_mode: "swap" -> not written: vLLM 0.33.0 has no preemption option; its engine '
        "preempts by recompute",
        "kernel.qk_clip: 30.0 -> not written: vLLM 0.33.0 has no such option",
        "kernel.pad_multiple: 16 -> not written: vLLM 0.33.0 pads batches to its own CUDA-graph sizes")
    header = export.text.split("\nmodel:")[0]
    assert all(f"#   {line}\n" in header for line in export.unexpressed)
    assert vllm_yaml(EngineConfig().to_dict()).unexpressed == ()  # the runtime's defaults: nothing to name


def test_async_scheduling_is_left_to_vllms_own_choice():
    export = vllm_yaml(runtime(scheduler={"async_scheduling": True}))
    assert "async-scheduling" not in export.args
    assert ("scheduler.async_scheduling: true -> not written: async-scheduling left to vLLM 0.33.0's own choice"
            in export.unexpressed)


def test_tiers_are_the_runtime_s_effective_ones_for_max_model_len():
    # max_model_len 1024: the first tier reaches it, so it is the only one the runtime keeps (share 1).
    export = vllm_yaml(runtime(cache={"block_tiers": TIERS}, scheduler={"max_model_len": 1024}))
    assert export.args["block-size"] == 8
    assert "# pagetune block tiers: {max_len: 1024, block_size: 8, share: 1.0}.\n" in export.text


def test_model_path_and_preset_comment():
    assert "replace it" in vllm_yaml(TUNED).text
    named = vllm_yaml(TUNED, model_path="/models/Meta-Llama-3-8B")
    assert named.args["model"] == "/models/Meta-Llama-3-8B" and "replace it" not in named.text
    hub = vllm_yaml(runtime(model={"name": "meta-llama/Meta-Llama-3-8B"}))
    assert hub.args["model"] == "meta-llama/Meta-Llama-3-8B" and "replace it" not in hub.text


def test_nulls_are_left_to_vllm_and_knobs_without_an_equivalent_are_listed():
    export = vllm_yaml(runtime(cache={"kv_cache_dtype": "float32"}, scheduler={"max_num_batched_tokens": None}))
    assert "kv-cache-dtype" not in export.args and "max-num-batched-tokens" not in export.args
    assert "# Null in pagetune, so left to vLLM's default:\n#   num-gpu-blocks-override\n#   max-num-batched-tokens\n" \
        in export.text
    want = {"model.seed": 0, "cache.kv_cache_dtype": "float32", "cache.swap_space": 0.0, "cache.watermark": 0.02,
            "cache.device_memory_gb": None, "scheduler.preemption_mode": "recompute", "kernel.qk_clip": 30.0,
            "device": "auto"}
    assert {k: export.unmapped[k] for k in want} == want
    mapped = {"model.name", "cache.block_size", "cache.gpu_memory_utilization", "kernel.cuda_graphs", "seed"}
    assert mapped.isdisjoint(export.unmapped)
    assert "\n#   cache.kv_cache_dtype: \"float32\"\n" in export.text


def test_study_and_trial_in_the_header():
    text = vllm_yaml({**TUNED, "metadata": {"study": "s1", "trial": 12}}).text
    assert text.splitlines()[1] == "# From pagetune study s1, trial 12; floats rounded to 4 significant digits."


def test_a_false_store_true_flag_is_left_out_with_a_comment():
    headless = VllmOption("headless", OptionKind.STORE_TRUE, False, "vllm/entrypoints/common/cli_args.py:445")
    assert _entry(headless, False) == (None, None, "headless: false (a store_true flag: leaving it out is false)")
    assert _entry(headless, True) == ("headless", True, "")


# --- serve_defaults -------------------------------------------------------------------------------------------

def _knobs(defaults: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in defaults.items() if k != "SOURCE"}


def test_serve_defaults_h200():
    defaults = serve_defaults(140.0, "NVIDIA H200")
    assert _knobs(defaults) == {**SERVE_DEFAULTS_CUDA, "scheduler.max_num_seqs": 1024,
                                "scheduler.max_num_batched_tokens": 8192}
    assert str(defaults["SOURCE"]).startswith("vLLM 0.33.0, device class H100 (>=70 GiB, not A100, not GB10): "
                                              "vllm/engine/arg_utils.py:2940-3039")


def test_serve_defaults_24_gib_gpu():
    assert _knobs(serve_defaults(24.0, "NVIDIA L4")) == {**SERVE_DEFAULTS_CUDA, "scheduler.max_num_seqs": 256,
                                                         "scheduler.max_num_batched_tokens": 2048}


@pytest.mark.parametrize("name", ["cpu", "CPU x86_64 x 16 cores"])
def test_serve_defaults_cpu_whatever_the_planned_memory(name):
    assert _knobs(serve_defaults(200.0, name)) == {
        "cache.block_size": 128, "cache.gpu_memory_utilization": 0.92, "cache.enable_prefix_caching": True,
        "scheduler.enable_chunked_prefill": True, "kernel.cuda_graphs": False, "scheduler.max_num_seqs": 128,
        "scheduler.max_num_batched_tokens": 2048}


@pytest.mark.parametrize(("memory_gb", "name", "row"), [
    (178.4, "NVIDIA B200", DeviceClass.LARGE), (79.6, "NVIDIA H100 80GB HBM3", DeviceClass.H100),
    (79.2, "NVIDIA A100-SXM4-80GB", DeviceClass.OTHER), (119.7, "NVIDIA GB10", DeviceClass.OTHER),
    (44.4, "NVIDIA L40S", DeviceClass.OTHER), (0.05, "cpu", DeviceClass.CPU),
])
def test_device_class(memory_gb, name, row):
    assert device_class(memory_gb, name) is row


def test_large_memory_row():
    assert _knobs(serve_defaults(178.4, "NVIDIA B200"))["scheduler.max_num_batched_tokens"] == 16384


def test_loader_helper_follows_vllm_s_own_example():
    # vLLM's docstring example (argparse_utils.py:606-631): port/tensor-parallel-size as --key str(value).
    assert config_argv("port: 12323\ntensor-parallel-size: 4\n", set()) == [
        "--port", "12323", "--tensor-parallel-size", "4"]
