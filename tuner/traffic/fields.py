"""Parsing one JSON line and validating its fields, shared by the JSONL formats (and Azure's CSV).

Every problem raises `LineError(reason)`; the loader adds `file:line`. JSON is read with the standard
library only (nothing is ever evaluated); numbers with a fraction or exponent parse as `Decimal` so
timestamps keep every digit, and `NaN`/`Infinity` are refused.
"""

from __future__ import annotations

import difflib
import json
from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any, NamedTuple

from tuner.traffic.requests import MAX_TOKENS
from tuner.traffic.tokens import Prompt, Segment

MAX_TIMESTAMP_S = Decimal(10) ** 12  # ~31,700 years of unix time: anything larger is not a timestamp


class LineError(Exception):
    """A line is wrong. `fatal`: the file cannot be read past it (a bad CSV header), even in skip mode."""

    def __init__(self, reason: str, *, fatal: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.fatal = fatal


def _refuse_constant(name: str) -> Any:
    raise LineError(f"not valid JSON: {name} is not a number JSON allows")


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise LineError(f"field {key!r} appears twice")
        obj[key] = value
    return obj


def parse_object(text: str) -> dict[str, Any]:
    """One JSON object from one line."""
    try:
        value = json.loads(text, parse_float=Decimal, parse_constant=_refuse_constant,
                           object_pairs_hook=_unique_pairs)
    except json.JSONDecodeError as e:
        raise LineError(f"not valid JSON: {e.msg} (column {e.colno})") from None
    except RecursionError:
        raise LineError("not valid JSON: nested too deeply") from None
    except ValueError as e:  # e.g. an integer literal with more digits than Python converts
        raise LineError(f"not valid JSON: {e}") from None
    except ArithmeticError:  # decimal.InvalidOperation: an exponent beyond what Decimal holds
        raise LineError("not valid JSON: a number is out of range") from None
    if not isinstance(value, dict):
        raise LineError(f"expected a JSON object, got {show(value)}")
    return value


def show(value: Any) -> str:
    """A short description of a JSON value for messages (hostile values must not flood them)."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, dict):
        return "an object"
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_keys(obj: Mapping[str, Any], allowed: Collection[str]) -> None:
    """Unknown fields are errors that suggest the nearest known one."""
    for key in obj:
        if key not in allowed:
            near = difflib.get_close_matches(key, sorted(allowed), n=1)
            known = ", ".join(sorted(allowed))
            hint = f" (did you mean {near[0]!r}?)" if near else f"; known fields: {known}"
            raise LineError(f"unknown field {show(key)}{hint}")


def require(obj: Mapping[str, Any], key: str, label: str | None = None) -> Any:
    if key not in obj:
        raise LineError(f"{label or key} is missing")
    return obj[key]


def as_int(value: Any, label: str, *, low: int, high: int) -> int:
    """An integer in [low, high]; bools and numbers with a fraction part (5.0 too) are refused."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise LineError(f"{label} must be an integer, got {show(value)}")
    if not low <= value <= high:
        raise LineError(f"{label} must be in [{low}, {high}], got {show(value)}")
    return value


def as_length(value: Any, label: str) -> int:
    """A token count: at least 1 (replay cannot send or force nothing), at most MAX_TOKENS."""
    return as_int(value, label, low=1, high=MAX_TOKENS)


def as_str(value: Any, label: str) -> str:
    if not isinstance(value, str):
        raise LineError(f"{label} must be a string, got {show(value)}")
    return value


def as_list(value: Any, label: str) -> list[Any]:
    if not isinstance(value, list):
        raise LineError(f"{label} must be a list, got {show(value)}")
    return value


def to_ns(value: Any, label: str, *, unit_ns: int, max_units: Decimal) -> int:
    """A JSON number of `unit_ns`-nanosecond units in [0, max_units] as integer nanoseconds, exactly."""
    if isinstance(value, bool) or not isinstance(value, (int, Decimal)):
        raise LineError(f"{label} must be a number, got {show(value)}")
    if not 0 <= value <= max_units:  # checked before scaling: 1e999999 must not overflow the context
        raise LineError(f"{label} must be in [0, {max_units}], got {show(value)}")
    return int((Decimal(value) * unit_ns).to_integral_value(ROUND_HALF_EVEN))


class ParsedLine(NamedTuple):
    """What a format parser makes of one line, before tokens and the max_model_len policy."""

    timestamp_ns: int  # integer nanoseconds on the log's own clock (re-based by the loader)
    prompt: Prompt
    output_tokens: int
    request_id: str | None  # the log's own id; None: the loader names it "<stem>:<line>"
    priority: int = 0


class LineParser(ABC):
    """One format's parser (each format module's `Parser`): `parse(text)` returns a `ParsedLine`, or None for a
    line that holds no request (a CSV header), and raises `LineError` for a bad line. `block_size`: the tokens one
    `hash_ids` block covers (`hash_block_size`, else the format's own default); formats without block ids have
    no default and ignore it."""

    DEFAULT_HASH_BLOCK_SIZE: int | None = None

    def __init__(self, hash_block_size: int | None = None) -> None:
        self.block_size = hash_block_size or self.DEFAULT_HASH_BLOCK_SIZE

    @abstractmethod
    def parse(self, text: str) -> ParsedLine | None: ...


def request_id_of(value: Any, label: str) -> str:
    text = as_str(value, label)
    if not 1 <= len(text) <= 256:
        raise LineError(f"{label} must have 1 to 256 characters, got {len(text)}")
    return text


def hash_block_segments(value: Any, label: str, *, prompt_tokens: int,
                        block_size: int) -> tuple[Segment, ...]:
    """One shared segment per prefix block id; ids are integers or strings (traces differ)."""
    ids = as_list(value, label)
    blocks = -(-prompt_tokens // block_size)
    if len(ids) > blocks:
        raise LineError(f"{label} has {len(ids)} blocks but {prompt_tokens} prompt tokens fill only {blocks} "
                        f"of {block_size} tokens (a different block size? pass hash_block_size)")
    segments = []
    for i, h in enumerate(ids):
        if isinstance(h, bool) or not isinstance(h, (int, str)) or (isinstance(h, int) and abs(h) >= 2**64):
            raise LineError(f"{label}[{i}] must be an integer or a string, got {show(h)}")
        kind = "i" if isinstance(h, int) else "s"
        length = min(block_size, prompt_tokens - i * block_size)  # the last block may be partial
        segments.append(Segment(f"block:{block_size}:{kind}{h}", length))
    return tuple(segments)
