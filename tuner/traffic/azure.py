"""Azure LLM inference trace CSV (Azure/AzurePublicDataset, 2023 and 2024 traces):

    TIMESTAMP,ContextTokens,GeneratedTokens
    2023-11-16 18:17:03.9799600,4808,10

- The first non-blank line is the header; the three columns are found by name (case and spaces
  ignored), other columns are ignored. A missing header is an error even in skip mode.
- `TIMESTAMP`: a wall-clock string `YYYY-MM-DD HH:MM:SS[.fraction]` with up to 9 fractional digits
  and an optional `Z`/`+HH:MM` offset (no offset: read as UTC; only differences matter), or a plain
  number of seconds. Parsed to integer nanoseconds, so 7-digit fractions survive exactly.
- `ContextTokens` / `GeneratedTokens`: prompt and output tokens, each >= 1. Prompts are synthesized
  and unique (the trace records no prefix sharing).
"""

from __future__ import annotations

import csv
import re
from datetime import datetime, timedelta, timezone
from decimal import Decimal

from tuner.traffic.fields import MAX_TIMESTAMP_S, LineError, LineParser, ParsedLine, as_length, to_ns
from tuner.traffic.tokens import SyntheticPrompt

NAME = "azure"
COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_WALL = re.compile(r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)?")
_INT = re.compile(r"[+-]?\d{1,18}")
_SECONDS = re.compile(r"\d{1,13}(?:\.\d{1,9})?")


def _cells(text: str) -> list[str]:
    try:
        return [cell.strip() for cell in next(csv.reader([text]))]
    except (csv.Error, StopIteration) as e:
        raise LineError(f"not valid CSV: {e}") from None


def sniff(text: str) -> bool:
    try:
        return {c.lower() for c in COLUMNS} <= {c.lower() for c in _cells(text)}
    except LineError:
        return False


class Parser(LineParser):
    """The format has no block ids: `hash_block_size` does not apply."""

    def __init__(self, hash_block_size: int | None = None) -> None:
        super().__init__(hash_block_size)
        self.columns: tuple[int, int, int] | None = None  # positions of COLUMNS, from the header
        self.width = 0

    def parse(self, text: str) -> ParsedLine | None:
        cells = _cells(text)
        if self.columns is None:
            self._read_header(cells)
            return None
        if len(cells) != self.width:
            raise LineError(f"expected {self.width} columns, got {len(cells)}")
        stamp, context, generated = (cells[i] for i in self.columns)
        prompt = as_length(_int(context, "ContextTokens"), "ContextTokens")
        output = as_length(_int(generated, "GeneratedTokens"), "GeneratedTokens")
        return ParsedLine(_timestamp_ns(stamp), SyntheticPrompt(prompt), output, None)

    def _read_header(self, cells: list[str]) -> None:
        names = [c.lower() for c in cells]
        missing = [c for c in COLUMNS if c.lower() not in names]
        if missing:
            raise LineError(f"expected a header naming {', '.join(COLUMNS)}; missing {', '.join(missing)}",
                            fatal=True)
        self.columns = tuple(names.index(c.lower()) for c in COLUMNS)  # type: ignore[assignment]
        self.width = len(cells)


def _int(cell: str, label: str) -> int:
    if not _INT.fullmatch(cell):
        raise LineError(f"{label} must be an integer, got {cell[:40]!r}")
    return int(cell)


def _timestamp_ns(cell: str) -> int:
    if _SECONDS.fullmatch(cell):
        return to_ns(Decimal(cell), "TIMESTAMP", unit_ns=10**9, max_units=MAX_TIMESTAMP_S)
    match = _WALL.fullmatch(cell)
    if match is None:
        raise LineError(f"TIMESTAMP must look like 2023-11-16 18:17:03.9799600, got {cell[:40]!r}")
    year, month, day, hour, minute, second, fraction, offset = match.groups()
    try:
        fields = (int(year), int(month), int(day), int(hour), int(minute), int(second))
        wall = datetime(*fields, tzinfo=timezone.utc)
    except ValueError as e:
        raise LineError(f"TIMESTAMP {cell!r} is not a valid time ({e})") from None
    seconds = (wall - _EPOCH) // timedelta(seconds=1)
    if offset and offset != "Z":  # in integers: shifting a datetime near year 1 or 9999 overflows
        sign = 1 if offset[0] == "+" else -1
        seconds -= sign * (int(offset[1:3]) * 3600 + int(offset[4:6]) * 60)
    return seconds * 10**9 + int((fraction or "0").ljust(9, "0"))
