"""Export the winner: `best.yaml`, `vllm.yaml` and `report.md`, each written atomically and checked.

`best.yaml` is the runtime section itself (model, cache, scheduler, kernel, ...) with the provenance in
EngineConfig's own `metadata` field, so one file loads both ways:

    EngineConfig.from_yaml("best.yaml")                          # the runtime, or LLM.from_config
    cp best.yaml DIR/runtime/ && python -m tuner runtime=best 'hydra.searchpath=[file://DIR]' ...

(the `runtime` group's package is `runtime`, so the file needs no `runtime:` wrapper).

Each file goes to a temporary file in the same folder, is flushed and fsynced, loaded back and
checked, and only then renamed over the target (`os.replace` is atomic on POSIX): a reader, or a
process killed mid-export, sees the old file or the complete new one, never half of one.
"""

from __future__ import annotations

import json
import math
import os
import platform
import tempfile
from collections.abc import Callable, Mapping
from datetime import date, datetime, timezone
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any, NamedTuple

import yaml
from omegaconf import OmegaConf

from runtime.config import EngineConfig
from tuner.schema import hydra_schema

__all__ = ["ExportPaths", "VllmArgs", "build_metadata", "describe_hardware", "vllm_args", "write_exports"]


class ExportPaths(NamedTuple):
    best: Path  # the complete runtime config + metadata
    vllm: Path  # `vllm serve --config` keys
    report: Path  # markdown, best vs. baseline


class VllmArgs(NamedTuple):
    args: dict[str, Any]  # `vllm serve` argument (dashed) -> value
    unset: list[str]  # vLLM arguments whose pagetune value is null: each engine uses its own default
    unmapped: dict[str, Any]  # dotted runtime key -> value, for knobs vLLM has no argument for


# Runtime key -> `vllm serve` argument (names checked against vLLM's EngineArgs and CacheConfig).
# Not mapped: swap_space and preemption_mode (vLLM V1 always preempts by recompute and dropped CPU
# swap), block_tiers (vLLM takes one block size), watermark, the kernel knobs, device memory.
_VLLM_ARGS = {
    "model.name": "model",
    "model.dtype": "dtype",
    "seed": "seed",
    "cache.block_size": "block-size",
    "cache.gpu_memory_utilization": "gpu-memory-utilization",
    "cache.kv_cache_dtype": "kv-cache-dtype",
    "cache.enable_prefix_caching": "enable-prefix-caching",
    "cache.num_gpu_blocks_override": "num-gpu-blocks-override",
    "scheduler.max_num_seqs": "max-num-seqs",
    "scheduler.max_num_batched_tokens": "max-num-batched-tokens",
    "scheduler.enable_chunked_prefill": "enable-chunked-prefill",
    "scheduler.max_model_len": "max-model-len",
    "scheduler.policy": "scheduling-policy",
}
# pagetune kv_cache_dtype -> vLLM --kv-cache-dtype; vLLM has no float32 KV cache.
_VLLM_KV_CACHE_DTYPES = {"auto": "auto", "float16": "float16", "bfloat16": "bfloat16", "fp8_e4m3": "fp8_e4m3"}


def write_exports(out_dir: str | Path, *, runtime: Mapping[str, Any], metadata: Mapping[str, Any],
                  report_md: str) -> ExportPaths:
    """Write best.yaml, vllm.yaml and report.md into `out_dir`; each is loaded back and checked."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = EngineConfig.from_mapping({**runtime, "metadata": _plain(metadata, "metadata")})
    paths = ExportPaths(out / "best.yaml", out / "vllm.yaml", out / "report.md")
    _atomic_write(paths.best, _best_text(config), lambda p: _check_best(p, config))
    vllm = vllm_args(config)
    _atomic_write(paths.vllm, _vllm_text(vllm, config.metadata or {}), lambda p: _check_vllm(p, vllm.args))
    _atomic_write(paths.report, report_md, lambda p: _check_text(p, report_md))
    return paths


def vllm_args(config: EngineConfig) -> VllmArgs:
    """Split the runtime config into `vllm serve` arguments, unset ones, and knobs without an equivalent."""
    flat = _flatten({k: v for k, v in config.to_dict().items() if k != "metadata"})
    args: dict[str, Any] = {}
    unset: list[str] = []
    unmapped: dict[str, Any] = {}
    for key, value in flat.items():
        arg = _vllm_arg(key, value, config)
        if arg is None:
            unmapped[key] = value
        elif value is None:
            unset.append(arg)
        else:
            args[arg] = _VLLM_KV_CACHE_DTYPES[value] if key == "cache.kv_cache_dtype" else value
    return VllmArgs(args, unset, unmapped)


def _vllm_arg(key: str, value: Any, config: EngineConfig) -> str | None:
    if key == "cache.block_size" and config.cache.block_tiers:
        return None  # several block sizes; vLLM has one
    if key == "cache.kv_cache_dtype" and value not in _VLLM_KV_CACHE_DTYPES:
        return None
    return _VLLM_ARGS.get(key)


def build_metadata(*, study: str, trial: int, metrics: Mapping[str, float], traffic_sha256: str, model: str,
                   hardware: str | None = None, now: datetime | None = None) -> dict[str, Any]:
    """The provenance written into best.yaml (`runtime.metadata`)."""
    return {
        "study": study, "trial": trial, "metrics": dict(metrics), "traffic_sha256": traffic_sha256,
        "model": model, "hardware": hardware or describe_hardware(), "pagetune_version": _version(),
        "date": (now or datetime.now(timezone.utc)).isoformat(timespec="seconds"),
    }


def describe_hardware() -> str:
    """`N x GPU name`, or the CPU when no GPU is visible."""
    import torch

    if torch.cuda.is_available():
        return f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
    return f"CPU {platform.machine()} x {os.cpu_count()} cores"


def _version() -> str:
    try:
        return importlib_metadata.version("pagetune")
    except importlib_metadata.PackageNotFoundError:
        return "unknown"


# --- files ----------------------------------------------------------------------------------------

def _best_text(config: EngineConfig) -> str:
    meta = config.metadata or {}
    header = (f"# pagetune best runtime config: study {meta.get('study', '?')}, "
              f"trial {meta.get('trial', '?')}.\n"
              "# Load it with EngineConfig.from_yaml(PATH), or with Hydra: copy it to DIR/runtime/best.yaml\n"
              "# and run `python -m tuner runtime=best 'hydra.searchpath=[file://DIR]' ...`.\n")
    return header + yaml.safe_dump(config.to_dict(), sort_keys=False, default_flow_style=False)


def _vllm_text(vllm: VllmArgs, meta: Mapping[str, Any]) -> str:
    lines = [f"# vllm serve --config vllm.yaml   (pagetune study {meta.get('study', '?')}, "
             f"trial {meta.get('trial', '?')})",
             "# `model` is pagetune's model name: for a preset, put the checkpoint vLLM should serve.",
             yaml.safe_dump(vllm.args, sort_keys=False, default_flow_style=False).rstrip()]
    if vllm.unset:
        lines += ["", "# Not set (null in pagetune), so vLLM uses its own default:"]
        lines += [f"#   {arg}" for arg in vllm.unset]
    lines += ["", "# pagetune knobs with no vLLM equivalent:"]
    lines += [f"#   {key}: {json.dumps(value)}" for key, value in vllm.unmapped.items()]
    return "\n".join(lines) + "\n"


def _check_best(path: Path, config: EngineConfig) -> None:
    if EngineConfig.from_yaml(path) != config:
        raise RuntimeError(f"{path}: EngineConfig.from_yaml does not give back the exported config")
    # What `runtime=best` does: merge into the runtime schema (types, keys) and resolve.
    merged = OmegaConf.merge(OmegaConf.structured(hydra_schema(EngineConfig)), OmegaConf.load(path))
    if EngineConfig.from_mapping(OmegaConf.to_container(merged, resolve=True)) != config:  # type: ignore[arg-type]
        raise RuntimeError(f"{path}: Hydra does not load back the exported config")


def _check_vllm(path: Path, args: Mapping[str, Any]) -> None:
    if yaml.safe_load(path.read_text(encoding="utf-8")) != dict(args):
        raise RuntimeError(f"{path}: does not load back to the vLLM arguments")


def _check_text(path: Path, text: str) -> None:
    if path.read_text(encoding="utf-8") != text:
        raise RuntimeError(f"{path}: does not read back")


def _atomic_write(path: Path, text: str, check: Callable[[Path], None]) -> None:
    """Write through a checked temp file in the same folder, then rename it over `path`."""
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        tmp.chmod(0o644)  # mkstemp creates 0600
        check(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)  # make the rename itself durable


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- values ---------------------------------------------------------------------------------------

def _flatten(node: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in node.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _plain(value: Any, key: str) -> Any:
    """Metadata as YAML/OmegaConf-safe plain values; NaN becomes null (it never equals itself)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v, f"{key}.{k}") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, f"{key}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, str):
        if "${" in value:  # Hydra would try to resolve it as an interpolation
            raise ValueError(f"{key}: '${{' is not allowed in exported metadata, got {value!r}")
        return value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if hasattr(value, "item") and not isinstance(value, bool | int | float):
        value = value.item()  # numpy / torch scalars
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return None if math.isnan(value) else value
    raise TypeError(f"{key}: cannot export a {type(value).__name__} in metadata")
