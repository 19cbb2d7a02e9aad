"""The traffic formats by name, and detection of a file's format from its first lines.

Each format is a module with `NAME`, `sniff(text) -> bool` (does this line look like mine?) and
`Parser(hash_block_size)`, a `fields.LineParser`: its `parse(text)` returns a `ParsedLine`, or None for a
line that holds no request (a CSV header), and raises `LineError` for a bad line. Formats without block
ids ignore `hash_block_size`.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType

from tuner.traffic import azure, mooncake, native, openai_log
from tuner.traffic.fields import LineParser
from tuner.traffic.reader import RawLine
from tuner.traffic.requests import TrafficError

# Detection order matters: an OpenAI log line may also carry lengths, a Mooncake line never has
# native's fields, and native is the broadest JSON shape.
FORMATS: dict[str, ModuleType] = {m.NAME: m for m in (openai_log, mooncake, native, azure)}
SNIFF_LINES = 20  # non-blank text lines looked at before giving up


def make_parser(name: str, hash_block_size: int | None) -> LineParser:
    return FORMATS[name].Parser(hash_block_size)


def detect(head: Iterable[RawLine], path: str) -> str:
    """The format of the first sniffable line among the first SNIFF_LINES non-blank lines."""
    first_problem: RawLine | None = None
    looked = 0
    for line in head:
        if line.text is None:
            first_problem = first_problem or line
            continue
        if not line.text.strip():
            continue
        for name, module in FORMATS.items():
            if module.sniff(line.text):
                return name
        looked += 1
        if looked >= SNIFF_LINES:
            break
    if looked == 0 and first_problem is not None:
        raise TrafficError(f"{path}:{first_problem.number}: {first_problem.problem}")
    if looked == 0:
        raise TrafficError(f"{path}: the file is empty (no requests)")
    raise TrafficError(f"{path}: cannot tell the format from its first {looked} non-blank lines; "
                       f"pass the format ({', '.join(FORMATS)})")
