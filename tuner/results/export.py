"""Export the verdict's config: `best.yaml`, `vllm.yaml` and `report.md`, each written atomically and checked.

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

import math
import os
import tempfile
from collections.abc import Callable, Mapping
from datetime import date, datetime, timezone
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any, NamedTuple

import yaml
from omegaconf import OmegaConf

from runtime import EngineConfig
from tuner.schema import hydra_schema
from tuner.vllm import vllm_yaml

__all__ = ["ExportPaths", "provenance", "write_exports"]


class ExportPaths(NamedTuple):
    best: Path  # the complete runtime config + metadata
    vllm: Path  # `vllm serve --config` keys
    report: Path  # markdown, best vs. baseline


def write_exports(out_dir: str | Path, *, runtime: Mapping[str, Any], metadata: Mapping[str, Any],
                  report_md: str) -> ExportPaths:
    """Write best.yaml, vllm.yaml and report.md into `out_dir`; each is loaded back and checked."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = EngineConfig.from_mapping({**runtime, "metadata": _plain(metadata, "metadata")})
    paths = ExportPaths(out / "best.yaml", out / "vllm.yaml", out / "report.md")
    _atomic_write(paths.best, _best_text(config), lambda p: _check_best(p, config))
    vllm = vllm_yaml(config.to_dict())
    _atomic_write(paths.vllm, vllm.text, lambda p: _check_vllm(p, vllm.args))
    _atomic_write(paths.report, report_md, lambda p: _check_text(p, report_md))
    return paths


def provenance(now: datetime | None = None) -> dict[str, str]:
    """pagetune's version and the date, for best.yaml's metadata."""
    try:
        version = importlib_metadata.version("pagetune")
    except importlib_metadata.PackageNotFoundError:
        version = "unknown"
    return {"pagetune_version": version,
            "date": (now or datetime.now(timezone.utc)).isoformat(timespec="seconds")}


# --- files ----------------------------------------------------------------------------------------

def _best_text(config: EngineConfig) -> str:
    meta = config.metadata or {}
    header = (f"# pagetune runtime config: study {meta.get('study', '?')}, {meta.get('config', 'trial')} "
              f"(trial {meta.get('trial', '?')}).\n"
              f"# Verdict: {meta.get('verdict', '?')}\n"
              "# Load it with EngineConfig.from_yaml(PATH), or with Hydra: copy it to DIR/runtime/best.yaml\n"
              "# and run `python -m tuner runtime=best 'hydra.searchpath=[file://DIR]' ...`.\n")
    return header + yaml.safe_dump(config.to_dict(), sort_keys=False, default_flow_style=False)


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
