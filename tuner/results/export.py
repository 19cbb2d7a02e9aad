"""Export the verdict's config: `best.yaml`, `vllm.yaml` and `report.md`, each written atomically and checked.

`best.yaml` is the runtime section itself (model, cache, scheduler, kernel, ...) with the provenance in
EngineConfig's own `metadata` field, so one file loads both ways:

    EngineConfig.from_yaml("best.yaml")                          # the runtime, or LLM.from_config
    cp best.yaml DIR/runtime/ && python -m tuner runtime=best 'hydra.searchpath=[file://DIR]' ...

(the `runtime` group's package is `runtime`, so the file needs no `runtime:` wrapper).

The three are one set. Each is written into a staging folder beside the targets (`.exports-*`),
flushed, fsynced, loaded back and checked; only when all three are, they are renamed over the targets
(`os.replace`, atomic on POSIX, needs no space); a rename that fails puts back what the set replaced.
A reader, or a process killed mid-export, sees the old set or the new one, never half of a file; a full
disk or a read-only folder is an `ExportError` that names the path, and leaves the old set in place.
"""

from __future__ import annotations

import math
import os
import shutil
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
from tuner.vllm import VLLM_META, vllm_yaml

__all__ = ["ExportError", "ExportPaths", "provenance", "write_exports"]


class ExportError(RuntimeError):
    """The exports could not be written (disk full, read-only, not a folder); the message names the path."""

    def __init__(self, path: Path | str, err: OSError) -> None:
        self.path = Path(path)
        super().__init__(f"cannot write {path}: {err.strerror or err}")


class ExportPaths(NamedTuple):
    best: Path  # the complete runtime config + metadata
    vllm: Path  # `vllm serve --config` keys
    report: Path  # markdown, best vs. baseline


def write_exports(out_dir: str | Path, *, runtime: Mapping[str, Any], metadata: Mapping[str, Any],
                  report_md: str) -> ExportPaths:
    """Write best.yaml, vllm.yaml and report.md into `out_dir` as one set; each is loaded back and checked.
    Raises `ExportError` (the old set untouched) when the folder cannot take them."""
    out = Path(out_dir)
    kept = {k: v for k, v in (runtime.get("metadata") or {}).items() if k == VLLM_META}  # a vLLM trial's own args
    config = EngineConfig.from_mapping({**runtime, "metadata": _plain({**kept, **metadata}, "metadata")})
    vllm = vllm_yaml(config.to_dict())
    files = {"best.yaml": (_best_text(config), lambda p: _check_best(p, config)),
             "vllm.yaml": (vllm.text, lambda p: _check_vllm(p, vllm.args)),
             "report.md": (report_md, lambda p: _check_text(p, report_md))}
    try:
        out.mkdir(parents=True, exist_ok=True)
        for killed in out.glob(".exports-*"):  # the stage of an export killed midway
            shutil.rmtree(killed, ignore_errors=True)
        stage = Path(tempfile.mkdtemp(dir=out, prefix=".exports-"))
    except OSError as err:
        raise ExportError(out, err) from None
    try:
        for name, (text, check) in files.items():
            try:
                _write_checked(stage / name, text, check)
            except OSError as err:
                raise ExportError(out / name, err) from None
        try:
            _move_set(stage, out, list(files))
        except OSError as err:
            raise ExportError(err.filename2 or err.filename or out, err) from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return ExportPaths(out / "best.yaml", out / "vllm.yaml", out / "report.md")


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
    label, trial = meta.get("config"), meta.get("trial", "?")
    which = f"trial {trial}" if label in (None, f"trial {trial}") else f"{label} (trial {trial})"  # never twice
    header = (f"# pagetune runtime config: study {meta.get('study', '?')}, {which}.\n"
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


def _write_checked(path: Path, text: str, check: Callable[[Path], None]) -> None:
    """Write `path` (staged), flushed and fsynced, then check what reads back."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    path.chmod(0o644)
    check(path)


def _move_set(stage: Path, out: Path, names: list[str]) -> None:
    """Rename the staged files over their targets; if one rename fails, undo the ones before it."""
    _fsync_dir(stage)
    for name in names:  # the old set kept aside (hard links: no space, no copy)
        if (out / name).is_file():
            os.link(out / name, stage / f"{name}.old")
    moved: list[str] = []
    try:
        for name in names:
            os.replace(stage / name, out / name)
            moved.append(name)
    except OSError:
        for name in moved:
            old = stage / f"{name}.old"
            if old.exists():
                os.replace(old, out / name)
            else:
                (out / name).unlink()
        raise
    _fsync_dir(out)  # make the renames themselves durable


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
