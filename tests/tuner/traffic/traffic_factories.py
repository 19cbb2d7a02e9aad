"""Helpers for the traffic tests: a pure-Python reference of the token synthesis (an independent
implementation of what tuner/traffic/tokens.py documents) and JSON line factories."""

from __future__ import annotations

import hashlib
import json

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
TEXT_SEED = 0x7061676574756E65
OFFSET = 4


def _mix(x: int) -> int:
    z = (x + GOLDEN) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def ref_stream(key: str, n: int, vocab: int, start: int = 0) -> tuple[int, ...]:
    """Tokens start..start+n-1 of the segment named `key`."""
    digest = hashlib.blake2b(key.encode(), digest_size=8, person=b"pagetune-tok-v1").digest()
    seed = int.from_bytes(digest, "little")
    return tuple(OFFSET + _mix((seed + j * GOLDEN) & M64) % (vocab - OFFSET) for j in range(start, start + n))


def ref_text(text: str, vocab: int) -> tuple[int, ...]:
    data = text.encode()
    data += b"\xff" * (-len(data) % 4)
    chunks = [int.from_bytes(data[i:i + 4], "little") for i in range(0, len(data), 4)]
    return tuple(OFFSET + _mix(c ^ TEXT_SEED) % (vocab - OFFSET) for c in chunks)


def jline(**fields: object) -> str:
    return json.dumps(fields)
