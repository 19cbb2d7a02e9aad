"""`vllm serve`'s engine options as of VLLM_VERSION (each with the "path:line" of the source it was read at) and
what it picks on a device (`serve_defaults`: batch limits per device class, block size, memory)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Any

__all__ = ["OPTIONS", "VLLM_VERSION", "DeviceClass", "OptionKind", "VllmOption", "device_class", "serve_defaults"]

VLLM_VERSION = "0.33.0"  # PyPI sdist vllm-0.33.0.tar.gz; its vllm/_version.py: commit_id 'g4ba787ec9'

_ARGS = "vllm/engine/arg_utils.py"


class OptionKind(Enum):
    VALUE = "value"  # --key VALUE
    STORE_TRUE = "store_true"  # --key only; false is its absence
    BOOL_OPTIONAL = "bool_optional"  # argparse.BooleanOptionalAction: --key and --no-key


@dataclass(frozen=True)
class VllmOption:
    name: str  # the flag without its leading dashes, as a YAML key
    kind: OptionKind
    default: Any  # what argparse leaves when the flag is absent (None: the engine picks, see `note`)
    source: str  # "path:line" of the add_argument call in VLLM_VERSION
    value_type: type | None = None  # how argparse converts a VALUE option; None for flags
    choices: tuple[str, ...] = ()  # accepted values, when vLLM restricts them
    note: str = ""  # where the engine resolves the default or checks the value


def _option(name: str, kind: OptionKind, default: Any, line: int, value_type: type | None = None,
            choices: tuple[str, ...] = (), note: str = "") -> VllmOption:
    return VllmOption(name, kind, default, f"{_ARGS}:{line}", value_type, choices, note)


_V, _B = OptionKind.VALUE, OptionKind.BOOL_OPTIONAL
# A bool field of a config class becomes BooleanOptionalAction (vllm/engine/arg_utils.py:384-386). New in 0.33:
# `--enable-x` also gets `--disable-x`, and `--no-enable-x` still parses (vllm/utils/argparse_utils.py:120-146,179).
OPTIONS: Mapping[str, VllmOption] = MappingProxyType({o.name: o for o in (
    _option("model", _V, "Qwen/Qwen3-0.6B", 969, str,
            note="vllm/config/model.py:155; `vllm serve` also takes it as positional model_tag, and a `model:` "
                 "key in the config file (vllm/utils/argparse_utils.py:577)"),
    _option("dtype", _V, "auto", 977, str, ("auto", "bfloat16", "float", "float16", "float32", "half"),
            "vllm/config/model.py:100,200"),
    _option("seed", _V, 0, 978, int, note="vllm/config/model.py:210"),
    _option("max-model-len", _V, None, 991, int, note="vllm/config/model.py:249: None derives it from the model"),
    _option("enforce-eager", _B, False, 1000,
            note="vllm/config/model.py:276; true sets cudagraph_mode NONE (vllm/config/vllm.py:1766-1768)"),
    _option("block-size", _V, None, 1387, int,
            note="None -> CacheConfig.DEFAULT_BLOCK_SIZE 16 (vllm/config/cache.py:185,463), then the attention "
                 "backend's preferred size (vllm/platforms/interface.py:771-781): 16 for FlashAttention in general "
                 "(vllm/v1/attention/backends/flash_attn.py:367-379), 128 on CPU (vllm/platforms/cpu.py:561-563)"),
    _option("gpu-memory-utilization", _V, 0.92, 1389, float, note="vllm/config/cache.py:215"),
    _option("kv-cache-dtype", _V, "auto", 1397, str, (
        "auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "nvfp4_ds_mla",
        "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc", "octave_k3v4",
        "octave_k3v3", "octave_k3v3_compact", "ultraquant_4bit", "int4_per_token_head", "int8_per_token_head",
        "fp8_per_token_head", "nvfp4", "nvfp4_4over6"),
        "vllm/config/cache.py:44-67,235: shown as metavar, checked by CacheConfig (backends may register more)"),
    _option("num-gpu-blocks-override", _V, None, 1399, int, note="vllm/config/cache.py:251"),
    _option("enable-prefix-caching", _B, None, 1402,
            note="None -> ModelConfig.is_prefix_caching_supported (vllm/engine/arg_utils.py:3075-3076)"),
    _option("max-num-batched-tokens", _V, None, 1740, int, note="None -> per device, see serve_defaults"),
    _option("max-num-seqs", _V, None, 1754, int, note="None -> per device, see serve_defaults"),
    _option("scheduling-policy", _V, "fcfs", 1782, str, ("fcfs", "priority"), "vllm/config/scheduler.py:21,159"),
    _option("enable-chunked-prefill", _B, None, 1785,
            note="None -> ModelConfig.is_chunked_prefill_supported (vllm/engine/arg_utils.py:3047-3048)"),
    # its add_argument line in 0.33.0 was not read: the flag is in vLLM 0.26.0's argument list
    # (tuner/data/vllm-0.26.0-args.json: tensor_parallel_size, --tensor-parallel-size, int)
    VllmOption("tensor-parallel-size", _V, 1, "tuner/data/vllm-0.26.0-args.json", int,
               note="vllm/config/parallel.py ParallelConfig.tensor_parallel_size"),
)})


class DeviceClass(Enum):
    """The rows of EngineArgs.get_batch_defaults (vllm/engine/arg_utils.py:2940-3039)."""

    CPU = "cpu"  # the CPU platform replaces every memory row (arg_utils.py:3029-3037)
    LARGE = ">=160 GiB"  # B200/B300-like (arg_utils.py:2973-2982)
    H100 = ">=70 GiB, not A100, not GB10"  # H100/H200-like (arg_utils.py:2983-2996)
    OTHER = "other GPU"  # arg_utils.py:2997-3006


# OPENAI_API_SERVER usage context (vllm/entrypoints/cli/serve.py:191), world size 1: (max_num_seqs, tokens)
_SERVE_BATCH = {DeviceClass.CPU: (128, 2048), DeviceClass.LARGE: (1024, 16384), DeviceClass.H100: (1024, 8192),
                DeviceClass.OTHER: (256, 2048)}


def device_class(device_memory_gb: float, device_name: str) -> DeviceClass:
    """The row of vLLM's batch defaults for a device of `device_memory_gb` GiB named `device_name`.

    A name starting with "cpu" (pagetune's own CPU runs: "cpu", describe_hardware's "CPU x86_64 ...") is the
    CPU platform, whatever memory is planned. vLLM spots GB10 by compute capability (12, 1); from a name, the
    word "GB10" stands in for it.
    """
    name = device_name.strip().lower()
    if name.startswith("cpu"):
        return DeviceClass.CPU
    if device_memory_gb >= 160:
        return DeviceClass.LARGE
    if device_memory_gb >= 70 and "a100" not in name and re.search(r"\bgb10\b", name) is None:
        return DeviceClass.H100
    return DeviceClass.OTHER


def serve_defaults(device_memory_gb: float, device_name: str) -> dict[str, object]:
    """The knobs `vllm serve` picks when none is given, keyed by pagetune's dotted runtime paths, plus "SOURCE".

    For a generative decoder-only model on one device. vLLM then clamps the token budget to
    max_num_seqs * max_model_len (arg_utils.py:3221-3224) and, without chunked prefill, raises it to
    max_model_len (arg_utils.py:3194-3199): both need the model, so they are left out here.
    """
    row = device_class(device_memory_gb, device_name)
    seqs, tokens = _SERVE_BATCH[row]
    cpu = row is DeviceClass.CPU
    return {
        "cache.block_size": 128 if cpu else 16,
        "cache.gpu_memory_utilization": OPTIONS["gpu-memory-utilization"].default,
        "cache.enable_prefix_caching": True,
        "scheduler.enable_chunked_prefill": True,
        "kernel.cuda_graphs": not cpu,  # enforce_eager False; the CPU platform captures none (cpu.py:370)
        "scheduler.max_num_seqs": seqs,
        "scheduler.max_num_batched_tokens": tokens,
        "SOURCE": (f"vLLM {VLLM_VERSION}, device class {row.name} ({row.value}): {_ARGS}:2940-3039 (batch rows), "
                   f"{_ARGS}:3151-3240 (applied), vllm/config/cache.py:185,215,463 (block size 16, memory 0.92), "
                   "vllm/platforms/cpu.py:561-563 (CPU block size 128), vllm/config/model.py:276 (enforce_eager)"),
    }
