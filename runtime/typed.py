"""One validator for every frozen config: a dataclass built from a plain mapping, each value checked
against its field's type hint, every error naming the dotted key.

Used by the runtime (`EngineConfig.from_mapping`) and by the tuner (`tuner.config.load_app_config`), so
both speak the same rules: unknown keys are errors (with the closest known key suggested), `bool` is
not a number, an `int` is accepted for a `float`, `None` only where the hint allows it, nested
dataclasses, `tuple[X, ...]`, `list[X]`, `dict[str, X]` and enums are built recursively. The
dataclass's own `__post_init__` then checks ranges and combinations.
"""

from __future__ import annotations

import dataclasses
import difflib
import sys
from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints

__all__ = ["build", "closest"]


def closest(word: str, options: Any) -> str:
    """` (did you mean 'x'?)` for the closest of `options`, or nothing."""
    close = difflib.get_close_matches(str(word), sorted(map(str, options)), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def build(cls: type, data: Any, error: type[Exception], prefix: str = "") -> Any:
    """Frozen dataclass `cls` from the mapping `data`; `error(message)` for anything wrong."""
    if isinstance(data, cls):
        return data
    if not isinstance(data, Mapping):
        raise error(f"{prefix.rstrip('.') or 'config'}: expected a mapping, got {type(data).__name__}")
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if key not in fields:
            raise error(f"unknown key '{prefix}{key}'{closest(key, fields)}")
        kwargs[key] = _coerce(hints[key], value, f"{prefix}{key}", error)
    missing = [name for name, f in fields.items() if name not in kwargs and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise error(f"{prefix.rstrip('.') or 'config'}: missing {', '.join(repr(m) for m in missing)}")
    try:
        return cls(**kwargs)
    except TypeError as e:  # a __post_init__ comparing a value of the wrong shape
        raise error(f"{prefix.rstrip('.') or 'config'}: {e}") from None


def _coerce(hint: Any, value: Any, key: str, error: type[Exception]) -> Any:
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, UnionType):
        if value is None:
            if type(None) not in args:
                raise error(f"{key}: must not be null")
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(inner[0] if len(inner) == 1 else Any, value, key, error)
    if hint is Any:
        return value
    if dataclasses.is_dataclass(hint):
        return build(hint, value, error, f"{key}.")
    if value is None:
        raise error(f"{key}: must not be null")
    if isinstance(hint, type) and issubclass(hint, Enum):
        return _enum(hint, value, key, error)
    if origin in (tuple, list):
        return _sequence(origin, args[0], value, key, error)
    if origin is dict or hint is dict:
        if not isinstance(value, Mapping):
            raise error(f"{key}: expected a mapping, got {value!r}")
        inner = args[1] if args else Any
        return {k: _coerce(inner, v, f"{key}.{k}", error) for k, v in value.items()}
    return _scalar(hint, value, key, error)


def _enum(hint: type[Enum], value: Any, key: str, error: type[Exception]) -> Enum:
    try:
        return hint(value)
    except ValueError:
        raise error(f"{key}: expected one of {[m.value for m in hint]}, got {value!r}") from None


def _sequence(origin: type, item: Any, value: Any, key: str, error: type[Exception]) -> Any:
    if not isinstance(value, list | tuple):
        raise error(f"{key}: expected a list, got {value!r}")
    items = [_coerce(item, v, f"{key}[{i}]", error) if not dataclasses.is_dataclass(item)
             else build(item, v, error, f"{key}[{i}].") for i, v in enumerate(value)]
    return tuple(items) if origin is tuple else items


def _scalar(hint: Any, value: Any, key: str, error: type[Exception]) -> Any:
    if hint is bool:
        if not isinstance(value, bool):
            raise error(f"{key}: expected true or false, got {value!r}")
    elif hint is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise error(f"{key}: expected an integer, got {value!r}")
    elif hint is float:
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise error(f"{key}: expected a number, got {value!r}")
        if isinstance(value, int) and abs(value) > sys.float_info.max:  # float() would overflow
            raise error(f"{key}: too large for a float (|value| > 1.8e308)")
        return float(value)
    elif hint is str:
        if not isinstance(value, str):
            raise error(f"{key}: expected a string, got {value!r}")
    elif hint is Path:
        if not isinstance(value, str | Path):
            raise error(f"{key}: expected a path, got {value!r}")
        return Path(value)
    return value
