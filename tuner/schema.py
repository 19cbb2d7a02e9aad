"""Hydra schema derived from frozen dataclasses: a mutable twin of each, same fields, types and defaults.

Hydra merges YAML and overrides into its schema in place, which a frozen dataclass forbids, so the
schema is derived rather than written twice: nested dataclasses are twinned, tuples become lists,
paths become strings, and a required field is null until set. `tuner.config` registers the twin of
`AppConfig` in the ConfigStore as `pagetune_schema`.
"""

from __future__ import annotations

import dataclasses
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
