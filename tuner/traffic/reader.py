"""Read a traffic file as numbered text lines, in bounded chunks, plain or gzip-compressed.

A line that cannot be text (invalid UTF-8, NUL bytes) or is longer than `MAX_LINE_BYTES` comes back
with a problem instead of text, so the loader can report `file:line` and, in skip mode, go on.
No line is ever read whole before its length is known, so a 10 GB line costs 16 MiB, not 10 GB.
"""

from __future__ import annotations

import gzip
import hashlib
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, NamedTuple

from tuner.traffic import requests as limits
from tuner.traffic.requests import TrafficError

_GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 1 << 20


class RawLine(NamedTuple):
    number: int  # 1-based
    text: str | None  # without the line ending; None when `problem` says why it is not text
    problem: str | None


def file_sha256(path: str | Path) -> str:
    """sha256 of the bytes as stored (compressed, for a .gz), read in chunks."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
    except OSError as e:
        raise TrafficError(f"{path}: cannot read: {e.strerror or e}") from None
    return digest.hexdigest()


def read_lines(path: str | Path) -> Iterator[RawLine]:
    """Every line of the file, numbered from 1; blank lines included (the parsers ignore them)."""
    try:
        with open(path, "rb") as raw:
            compressed = raw.read(2) == _GZIP_MAGIC
            raw.seek(0)
            stream: BinaryIO = gzip.GzipFile(fileobj=raw) if compressed else raw  # type: ignore[assignment]
            yield from _numbered(stream, str(path))
    except OSError as e:
        # Opening failed (missing, a directory, no permission); corrupt gzip is handled in _numbered.
        raise TrafficError(f"{path}: cannot read: {e.strerror or e}") from None


def _numbered(stream: BinaryIO, path: str) -> Iterator[RawLine]:
    limit = limits.MAX_LINE_BYTES  # read at call time so tests can lower it
    number = 0
    while True:
        number += 1
        try:
            chunk = stream.readline(limit + 1)
            too_long = len(chunk) > limit and not chunk.endswith(b"\n")
            if too_long:
                _skip_rest_of_line(stream)
        except (OSError, EOFError, zlib.error) as e:
            raise TrafficError(f"{path}:{number}: the compressed data is corrupt ({e})") from None
        if not chunk:
            return
        if too_long:
            yield RawLine(number, None, f"the line is longer than {limit} bytes")
        else:
            yield _decode(number, chunk)


def _skip_rest_of_line(stream: BinaryIO) -> None:
    while (rest := stream.readline(_CHUNK)) and not rest.endswith(b"\n"):
        pass


def _decode(number: int, chunk: bytes) -> RawLine:
    nul = chunk.find(b"\x00")
    if nul >= 0:
        return RawLine(number, None, f"binary data, not text (NUL byte at column {nul + 1})")
    try:
        text = chunk.decode("utf-8")
    except UnicodeDecodeError as e:
        return RawLine(number, None, f"not UTF-8 text (byte 0x{chunk[e.start]:02x} at column {e.start + 1})")
    if number == 1:
        text = text.removeprefix("\ufeff")  # a byte-order mark some editors write
    return RawLine(number, text.rstrip("\r\n"), None)
