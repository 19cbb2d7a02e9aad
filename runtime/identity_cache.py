"""Work remembered per tuple by its identity: a replay adds the same prompt tuples on every run, and a lookup by
value would hash every token again. An entry holds its tuple, so the tuple's id is not reused while it is
there; past `limit` entries the cache starts over."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["IdentityCache"]

V = TypeVar("V")


class IdentityCache(Generic[V]):
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._entries: dict[tuple[int, object], tuple[tuple, V]] = {}

    def get(self, key: tuple, extra: object, compute: Callable[[], V]) -> V:
        """`compute()` for the tuple `key` (and `extra`, e.g. a block size), once while it is remembered."""
        slot = (id(key), extra)
        hit = self._entries.get(slot)
        if hit is not None and hit[0] is key:
            return hit[1]
        if len(self._entries) >= self.limit:
            self._entries.clear()
        value = compute()
        self._entries[slot] = (key, value)
        return value

    def __len__(self) -> int:
        return len(self._entries)
