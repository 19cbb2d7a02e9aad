"""The `write` fixture: traffic files from lines or exact bytes, in the test's tmp_path."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

WriteFile = Callable[..., str]


@pytest.fixture
def write(tmp_path: Path) -> WriteFile:
    """write(name, *lines, newline="\\n") -> path as str; write(name, raw=b"...") for exact bytes."""
    def _write(name: str, *lines: str, raw: bytes | None = None, newline: str = "\n") -> str:
        path = tmp_path / name
        path.write_bytes(raw if raw is not None else "".join(line + newline for line in lines).encode())
        return str(path)
    return _write
