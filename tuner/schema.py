"""Hydra schema derived from frozen dataclasses: a mutable twin of each, same fields, types and defaults.

Hydra merges YAML and overrides into its schema in place, which a frozen dataclass forbids, so the
schema is derived rather than written twice: nested dataclasses are twinned, tuples become lists,
paths become strings, and a required field is null until set. `tuner.config` registers the twin of
`AppConfig` in the ConfigStore as `pagetune_schema`.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable
from dataclasses import field
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints

_TWINS: dict[type, type] = {}


def hydra_schema(cls: type) -> type:
    """The mutable dataclass Hydra validates `cls`'s section with (cached)."""
    if cls not in _TWINS:
        hints = get_type_hints(cls)
        specs = [(f.name, _twin_type(hints[f.name], f), field(default_factory=_twin_default(f)))
                 for f in dataclasses.fields(cls)]
        _TWINS[cls] = dataclasses.make_dataclass(f"{cls.__name__}Schema", specs)
    return _TWINS[cls]


def _twin_type(hint: Any, f: dataclasses.Field | None = None) -> Any:
    origin, args = get_origin(hint), get_args(hint)
    if f is not None and _no_default(f):  # a required field (traffic) is null until set
        return _twin_type(hint) | None
    if dataclasses.is_dataclass(hint):
        return hydra_schema(hint)
    if hint is Path:
        return str
    if origin in (Union, UnionType):
        (inner,) = [a for a in args if a is not type(None)]
        return _twin_type(inner) | None
    if origin in (tuple, list):
        return list[_twin_type(args[0])]
    if origin is dict:
        return dict[args[0], _twin_type(args[1])]
    return hint


def _no_default(f: dataclasses.Field) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _twin_default(f: dataclasses.Field) -> Callable[[], Any]:
    if f.default_factory is not dataclasses.MISSING:
        return lambda: _twin_value(f.default_factory())  # type: ignore[misc]
    return lambda: None if _no_default(f) else _twin_value(f.default)


def _twin_value(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        twin = hydra_schema(type(value))
        return twin(**{f.name: _twin_value(getattr(value, f.name)) for f in dataclasses.fields(value)})
    if isinstance(value, tuple):
        return [_twin_value(v) for v in value]
    return value


# --- command-line keys ------------------------------------------------------------------------------------

def schema_keys(cls: type, prefix: str = "") -> tuple[set[str], set[str]]:
    """(every dotted key of `cls`'s fields, nested dataclasses walked; the keys below which any key goes: dicts)."""
    keys: set[str] = set()
    open_ended: set[str] = set()
    hints = get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key, hint = f"{prefix}{f.name}", hints[f.name]
        keys.add(key)
        inner = [a for a in get_args(hint) if a is not type(None)] if get_origin(hint) in (Union, UnionType) else []
        hint = inner[0] if len(inner) == 1 else hint
        if dataclasses.is_dataclass(hint):
            sub, sub_open = schema_keys(hint, f"{key}.")
            keys |= sub
            open_ended |= sub_open
        elif get_origin(hint) is dict or hint is dict or hint is Any:
            open_ended.add(key)
    return keys, open_ended


def unknown_override(overrides: list[str], cls: type, groups: set[str]) -> str | None:
    """The first `key=value` argument whose key is not in `cls`'s schema (nor a config group, nor Hydra's), as one
    line naming the key meant; None when every key is known. Hydra's own answer ("To append to your config use
    +key=value") sends a mistyped key on to fail against the schema."""
    keys, open_ended = schema_keys(cls)
    for arg in overrides:
        if arg.startswith("-") or "=" not in arg:
            continue
        key = arg.split("=", 1)[0].lstrip("+~")
        if key.split(".")[0].split("/")[0] == "hydra" or key in keys or key in groups or key.split("/")[0] in groups:
            continue
        if any(key.startswith(f"{k}.") for k in open_ended):
            continue
        meant = difflib.get_close_matches(key, sorted(keys | groups), n=1, cutoff=0.6)
        hint = f"did you mean {meant[0]}?" if meant else "see `python -m tuner --cfg job` for every key"
        return f"{arg}: {key} is not a pagetune setting; {hint}"
    return None
