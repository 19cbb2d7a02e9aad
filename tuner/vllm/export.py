"""pagetune's runtime config written as a `vllm serve --config vllm.yaml` file (`vllm_yaml`), with the knobs
vLLM cannot express said in its header.

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
from collections.abc import Mapping
from typing import Any, NamedTuple

import yaml

from runtime import BlockTier, EngineConfig, ModelLoadError, model_info
from tuner.rounding import rounded
from tuner.vllm.meta import is_vllm_defaults, serve_keys, vllm_args
from tuner.vllm.serve import OPTIONS, VLLM_VERSION, OptionKind, VllmOption

__all__ = ["MAPPED", "VllmExport", "flatten", "vllm_yaml"]

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
MAPPED = {
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
    unset = [name for key, name in MAPPED.items() if flat[key] is None and key != "kernel.cuda_graphs"]
    unmapped = {k: v for k, v in flat.items() if k not in MAPPED or not _has_equivalent(k, v)}
    args = {e.key: e.value for e in entries if e.key is not None}
    unexpressed = _unexpressed(engine, unmapped, args)
    return VllmExport(_text(entries, unset, unmapped, engine.metadata or {}, unexpressed), args, unmapped,
                      unexpressed)


# What vllm.yaml holds instead of a measured knob vLLM has no option for (pagetune key -> the words after "->").
_INSTEAD = {
    "cache.swap_space": "not written: vLLM {v} has no swap space option; its engine preempts by recompute",
    "scheduler.preemption_mode": "not written: vLLM {v} has no preemption option; its engine preempts by recompute",
    "kernel.pad_multiple": "not written: vLLM {v} pads batches to its own CUDA-graph sizes",
    "scheduler.async_scheduling": "not written: async-scheduling left to vLLM {v}'s own choice",
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
        lines.append(f"{key}: {json.dumps(rounded(value, 4))} -> {instead}")
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
    """The file's keys in MAPPED's order; nulls and values without an equivalent are left out."""
    entries: list[_Entry] = []
    for key, name in MAPPED.items():
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
        return _Entry(option.name, rounded(value, 4), "")
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
    listed = ", ".join(f"{{max_len: {t.max_len}, block_size: {t.block_size}, share: {rounded(t.share, 4)}}}"
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
    lines += [f"#   {key}: {json.dumps(rounded(value, 4))}" for key, value in unmapped.items()]
    return "\n".join(lines) + "\n"
