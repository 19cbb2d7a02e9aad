"""`vllm serve` as of one vLLM release: its engine options, its defaults per device, and pagetune's runtime
config written as a `vllm serve --config vllm.yaml` file.

Every fact names the "path:line" of VLLM_VERSION's source it was read at (docs/VLLM.md has the table).

How `vllm serve --config FILE` turns the file into argv (vllm/utils/argparse_utils.py:654-671):

    YAML                 argv
    key: true            --key
    key: false           --no-key when the parser that expands the file owns `--no-key`, else nothing
    key: 12              --key 12          (str(value); a null would become the string "None")

`vllm serve` expands the file in the top-level `vllm` parser (vllm/entrypoints/cli/main.py:110), which owns
no engine flag, so there `key: false` is dropped and the engine falls back to its default; releases before
0.28 drop it in every parser. `no-key: true` becomes `--no-key` everywhere, so a false boolean is written
that way, and a null is never written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Any, NamedTuple

import yaml

from runtime import BlockTier, EngineConfig, ModelLoadError, model_info

__all__ = ["OPTIONS", "VLLM_VERSION", "DeviceClass", "OptionKind", "VllmExport", "VllmOption", "device_class",
           "serve_defaults", "vllm_yaml"]

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


# --- what `vllm serve` picks on a device ------------------------------------------------------------------

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


# --- the export ---------------------------------------------------------------------------------------------

class VllmExport(NamedTuple):
    text: str  # the whole vllm.yaml, comments included
    args: dict[str, Any]  # what a YAML loader reads from `text`: option (or no-option) -> value
    unmapped: dict[str, Any]  # dotted pagetune key -> value, for knobs vLLM has no option for
    unexpressed: tuple[str, ...] = ()  # knobs set off the runtime's default that vLLM cannot express, "-> instead"


class _Entry(NamedTuple):
    key: str | None  # None: a comment line only
    value: Any
    comment: str  # written on the line above; "" for none


# pagetune key -> option; the other knobs, and cache.block_tiers, have no vLLM equivalent.
_MAPPED = {
    "model.name": "model", "model.dtype": "dtype", "seed": "seed", "cache.block_size": "block-size",
    "cache.gpu_memory_utilization": "gpu-memory-utilization", "cache.kv_cache_dtype": "kv-cache-dtype",
    "cache.enable_prefix_caching": "enable-prefix-caching", "cache.num_gpu_blocks_override": "num-gpu-blocks-override",
    "scheduler.max_num_seqs": "max-num-seqs", "scheduler.max_num_batched_tokens": "max-num-batched-tokens",
    "scheduler.enable_chunked_prefill": "enable-chunked-prefill", "scheduler.max_model_len": "max-model-len",
    "scheduler.policy": "scheduling-policy", "kernel.cuda_graphs": "enforce-eager",
    "tensor_parallel_size": "tensor-parallel-size",
}


def vllm_yaml(config: Mapping[str, Any], *, model_path: str | None = None) -> VllmExport:
    """Write the runtime config (`EngineConfig.to_dict()`'s shape) as a `vllm serve --config` file.

    `model_path` replaces `model.name` as the model to serve. `kernel.cuda_graphs` may be null: vLLM's own
    default (graphs on under CUDA), so `enforce-eager` is left out.
    """
    engine = EngineConfig.from_mapping(config)
    flat = flatten({k: v for k, v in engine.to_dict().items() if k != "metadata"})
    entries = _with_vllm_entries(engine, _entries(engine, flat, model_path))
    unset = [name for key, name in _MAPPED.items() if flat[key] is None and key != "kernel.cuda_graphs"]
    unmapped = {k: v for k, v in flat.items() if k not in _MAPPED or not _has_equivalent(k, v)}
    args = {e.key: e.value for e in entries if e.key is not None}
    unexpressed = _unexpressed(engine, unmapped, args)
    return VllmExport(_text(entries, unset, unmapped, engine.metadata or {}, unexpressed), args, unmapped,
                      unexpressed)


# What vllm.yaml holds instead of a measured knob vLLM has no option for (pagetune key -> the words after "->").
_INSTEAD = {
    "cache.swap_space": "not written: vLLM {v} has no swap space option; its engine preempts by recompute",
    "scheduler.preemption_mode": "not written: vLLM {v} has no preemption option; its engine preempts by recompute",
    "kernel.pad_multiple": "not written: vLLM {v} pads batches to its own CUDA-graph sizes",
    "cache.watermark": "not written: vLLM {v} admits requests by its own free-block rule",
    "cache.kv_cache_dtype": "not written: kv-cache-dtype left to vLLM's auto (the model's dtype)",
}


def _unexpressed(engine: EngineConfig, unmapped: Mapping[str, Any], args: Mapping[str, Any]) -> tuple[str, ...]:
    """Each knob the config sets off the runtime's default that vLLM cannot express, and what the file holds
    instead: the file is not the config pagetune measured."""
    default = flatten(EngineConfig.from_mapping({"model": {"name": engine.model.name}}).to_dict())
    lines = []
    for key, value in unmapped.items():
        if key in ("metadata", "device", "debug_integrity") or value == default.get(key):
            continue
        if key == "cache.block_tiers":
            instead = f"block-size: {args['block-size']} (the tier with the largest KV share; the first of equal ones)"
        else:
            instead = _INSTEAD.get(key, "not written: vLLM {v} has no such option").format(v=VLLM_VERSION)
        lines.append(f"{key}: {json.dumps(_round(value))} -> {instead}")
    return tuple(lines)


def flatten(node: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested runtime dict as dotted keys (`cache.block_size`)."""
    flat: dict[str, Any] = {}
    for key, value in node.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _entries(engine: EngineConfig, flat: Mapping[str, Any], model_path: str | None) -> list[_Entry]:
    """The file's keys in _MAPPED's order; nulls and values without an equivalent are left out."""
    entries: list[_Entry] = []
    for key, name in _MAPPED.items():
        value = flat[key]
        if key == "model.name":
            entries.append(_model_entry(value, model_path))
        elif key == "kernel.cuda_graphs":
            entries += _eager_entries(value)
        elif key == "cache.block_size":
            entries.append(_block_size_entry(engine))
        elif key == "tensor_parallel_size":
            entries += _shape_entries(engine)
        elif value is not None and _has_equivalent(key, value):
            entries.append(_entry(OPTIONS[name], value))
    return entries


def _with_vllm_entries(engine: EngineConfig, entries: list[_Entry]) -> list[_Entry]:
    """A config from executor=vllm: its vLLM-only args after the shared knobs (an arg replaces a shared knob's
    key); vLLM's defaults (its baseline): the model and those args only."""
    extra = serve_keys(vllm_args(engine))
    if is_vllm_defaults(engine):
        entries = [entries[0], _Entry(None, None, "vLLM's own defaults: no engine flag but the frozen knobs'")]
    names = {k.removeprefix("no-") for k in extra}
    kept = [e for e in entries if e.key is None or e.key.removeprefix("no-") not in names]
    return kept + [_Entry(key, value, "") for key, value in extra.items()]


def _has_equivalent(key: str, value: Any) -> bool:
    """False for a kv_cache_dtype vLLM lacks (float32): an explicit 16-bit one must match the model dtype."""
    return key != "cache.kv_cache_dtype" or value in OPTIONS["kv-cache-dtype"].choices


def _entry(option: VllmOption, value: Any) -> _Entry:
    if option.kind is OptionKind.VALUE:
        return _Entry(option.name, _round(value), "")
    if value:
        return _Entry(option.name, True, "")
    if option.kind is OptionKind.BOOL_OPTIONAL:
        return _Entry(f"no-{option.name}", True, f"{option.name}: false, as its negative flag (a loader may drop"
                                                 " `false`)")
    return _Entry(None, None, f"{option.name}: false (a store_true flag: leaving it out is false)")


def _is_preset(name: str) -> bool:
    try:
        return model_info(name).random_weights
    except ModelLoadError:
        return False


def _model_entry(name: str, model_path: str | None) -> _Entry:
    if model_path is None and _is_preset(name):
        return _Entry("model", name, f"pagetune preset {name!r} has random weights: replace it with the checkpoint "
                                     "(Hugging Face id or folder) vLLM should serve")
    return _Entry("model", model_path or name, "")


def _eager_entries(graphs: bool | None) -> list[_Entry]:
    if graphs is None:
        return [_Entry(None, None, "kernel.cuda_graphs: null -> enforce-eager left out: vLLM's default, CUDA graphs"
                                   " on under CUDA")]
    entry = _entry(OPTIONS["enforce-eager"], not graphs)
    return [entry._replace(comment=f"kernel.cuda_graphs: {json.dumps(graphs)} -> enforce-eager: "
                                   f"{json.dumps(not graphs)}")]


def _block_size_entry(engine: EngineConfig) -> _Entry:
    """One block size: pagetune's, or with tiers on, that of the tier holding the most KV memory."""
    if not engine.cache.block_tiers:
        return _Entry("block-size", engine.cache.block_size, "")
    tiers = _effective_tiers(engine)
    widest = max(tiers, key=lambda t: t.share)  # the first of equal shares
    listed = ", ".join(f"{{max_len: {t.max_len}, block_size: {t.block_size}, share: {_round(t.share)}}}"
                       for t in tiers)
    return _Entry("block-size", widest.block_size, f"pagetune block tiers: {listed}.\n"
                  "vLLM takes one block size: the one of the tier with the largest KV share.")


def _shape_entries(engine: EngineConfig) -> list[_Entry]:
    """`tensor-parallel-size` (left out at 1, vLLM's default, for one device), and the deployment's replicas in a
    comment: vLLM serves one replica per file."""
    degree, shape = engine.tensor_parallel_size, (engine.metadata or {}).get("deployment")
    if shape is None:
        return [] if degree == 1 else [_Entry("tensor-parallel-size", degree, "")]
    return [_Entry("tensor-parallel-size", degree,
                   f"deployment: {shape['replicas']} replica(s) of this server, {degree} GPU(s) each, on "
                   f"{shape['devices']} GPUs, behind a least-outstanding-requests load balancer")]


def _effective_tiers(engine: EngineConfig) -> tuple[BlockTier, ...]:
    """The tiers the runtime would use (asked of CacheConfig.tiers) when max_model_len is known."""
    max_len = engine.scheduler.max_model_len
    return engine.cache.block_tiers if max_len is None else engine.cache.tiers(max_len)


def _text(entries: list[_Entry], unset: list[str], unmapped: Mapping[str, Any], meta: Mapping[str, Any],
          unexpressed: tuple[str, ...]) -> str:
    study = f" study {meta.get('study', '?')}, trial {meta.get('trial', '?')}" if meta else ""
    lines = [f"# vllm serve --config vllm.yaml   (target: vLLM {VLLM_VERSION}; every key is one of its options)",
             f"# From pagetune{study}; floats rounded to 4 significant digits.",
             "# NOT MEASURED ON vLLM: pagetune measured this config on its own runtime; measure this file on vLLM "
             "before you rely on its figures."]
    if unexpressed:
        lines += [f"# Measured knobs vLLM {VLLM_VERSION} cannot express, and what this file holds instead:"]
        lines += [f"#   {line}" for line in unexpressed]
    for entry in entries:
        lines += [f"# {line}" for line in entry.comment.splitlines()]
        if entry.key is not None:
            lines.append(yaml.safe_dump({entry.key: entry.value}, default_flow_style=False).rstrip())
    if unset:
        lines += ["", "# Null in pagetune, so left to vLLM's default:"] + [f"#   {name}" for name in unset]
    lines += ["", f"# pagetune knobs with no vLLM {VLLM_VERSION} equivalent:"]
    lines += [f"#   {key}: {json.dumps(_round(value))}" for key, value in unmapped.items()]
    return "\n".join(lines) + "\n"


def _round(value: Any) -> Any:
    """Floats to 4 significant digits, inside lists and mappings too."""
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, list | tuple):
        return [_round(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _round(v) for k, v in value.items()}
    return value



# --- a trial on vLLM (executor=vllm) -------------------------------------------------------------------------

VLLM_META = "vllm"  # EngineConfig.metadata key: {"args": {dest: value}} (vLLM-only args), "defaults": true


def vllm_args(config: EngineConfig) -> dict[str, Any]:
    """The vLLM-only engine args a config carries (search=vllm's `vllm.NAME` knobs), by dest."""
    return dict(((config.metadata or {}).get(VLLM_META) or {}).get("args") or {})


def with_vllm_args(metadata: Mapping[str, Any] | None, args: Mapping[str, Any]) -> dict[str, Any]:
    """`metadata` with `args` added to its vLLM-only engine args."""
    entry = dict((metadata or {}).get(VLLM_META) or {})
    entry["args"] = {**(entry.get("args") or {}), **args}
    return {**(metadata or {}), VLLM_META: entry}


def is_vllm_defaults(config: EngineConfig) -> bool:
    """Whether the config is vLLM's own defaults (executor=vllm's baseline: no engine flag but the fixed ones)."""
    return bool(((config.metadata or {}).get(VLLM_META) or {}).get("defaults"))


def as_vllm_defaults(config: EngineConfig, fixed: Mapping[str, Any]) -> EngineConfig:
    """`config` marked as vLLM's defaults, with `fixed` (dotted knob paths -> value, the frozen knobs) as the only
    engine args written for it: `runtime.*` ones through the export's option names, `vllm.*` ones as they are."""
    args = {}
    for path, value in fixed.items():
        section, key = path.split(".", 1)
        if section == "vllm":
            args[key] = value
        elif key == "kernel.cuda_graphs" and value is not None:
            args["enforce_eager"] = not value
        elif key in _MAPPED and key != "model.name":
            args[_MAPPED[key].replace("-", "_")] = value
    meta = with_vllm_args({**(config.metadata or {}), VLLM_META: {"defaults": True}}, args)
    return EngineConfig.from_mapping({**config.to_dict(), "metadata": meta})


def serve_keys(args: Mapping[str, Any]) -> dict[str, Any]:
    """Engine args by dest (`async_scheduling`) as `vllm serve --config` keys, by the export's rules: dashes, a
    false flag as `no-KEY: true` (a loader drops `false`), a null left out (vLLM's default)."""
    out: dict[str, Any] = {}
    for dest, value in args.items():
        key = dest.replace("_", "-")
        if value is False:
            out[f"no-{key}"] = True
        elif value is not None:
            out[key] = _round(value)
    return out


def trial_file(config: EngineConfig, *, model: str, deploy: Mapping[str, Any], only_args: bool = False
               ) -> dict[str, Any]:
    """What `vllm serve --config FILE` reads for a trial: the export of `config` (vLLM's defaults, or `only_args`:
    only the model), its vLLM-only args, then `deploy` (executor.vllm.args, the same for every trial and the
    baseline)."""
    if only_args:
        return {"model": model, **serve_keys(vllm_args(config)), **serve_keys(deploy)}
    return {**vllm_yaml(config, model_path=model).args, **serve_keys(deploy)}


def option_names(path: str) -> tuple[str, ...]:
    """The vLLM options (dests) a knob path writes: `runtime.scheduler.max_num_seqs` -> (max_num_seqs,);
    `vllm.async_scheduling` -> (async_scheduling,); () for a runtime field with no vLLM equivalent."""
    section, key = path.split(".", 1)
    if section == "vllm":
        return (key,)
    return (_MAPPED[key].replace("-", "_"),) if section == "runtime" and key in _MAPPED else ()
