"""The startup heap kept out of Python's garbage collector while an engine serves.

An engine process holds a few hundred thousand objects that live as long as it does (torch, the model's modules,
the tuner's and server's imports). Python's oldest-generation collection walks all of them: about 190 ms on the
2-core CPU machine with the tiny preset and the replay's imports loaded (experiments/RESULTS.md, "A full
collection's pause"), a pause in which no step is launched, so every request in flight waits for it. Frozen
(`gc.freeze`), they are skipped by every later collection; objects made afterwards are collected as before.
vLLM freezes its engine's startup heap after its warm-up for the same reason.

    freeze_startup_heap()   for a process that serves one engine until it exits (the server's engine process)
    frozen_heap()           for one engine's life in a process that builds many (the tuner's worker, one per
                            trial): the heap is unfrozen when the block ends, so an engine dropped after it is
                            collected as usual (a frozen reference cycle is never freed, nor its GPU memory)
    CollectorPauses         the collections that ran while a block ran, each one's generation and duration
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["CollectorPauses", "freeze_startup_heap", "frozen_heap"]


def freeze_startup_heap() -> int:
    """Collect what is garbage now, then freeze every object left; returns how many are frozen."""
    gc.collect()  # first: garbage frozen now would never be reclaimed
    gc.freeze()
    return gc.get_freeze_count()


@contextmanager
def frozen_heap() -> Iterator[int]:
    """`freeze_startup_heap()` for the block's duration (yields the frozen count); unfrozen after it, even when
    it raises. Nested inside a freeze already made, it leaves that one in place."""
    if gc.get_freeze_count():
        yield gc.get_freeze_count()
        return
    count = freeze_startup_heap()
    try:
        yield count
    finally:
        gc.unfreeze()


class CollectorPauses:
    """`with CollectorPauses() as pauses:` records every collection that runs inside the block, its generation and
    its duration (`gc.callbacks`); `summary()` gives their count, the oldest generation's count, the longest and
    the total in ms."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float]] = []  # (generation, seconds)
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses.append((info["generation"], time.perf_counter() - self._started))

    def __enter__(self) -> CollectorPauses:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)

    def summary(self) -> dict[str, float]:
        times = [1e3 * s for _, s in self.pauses]
        return {"collections": len(times), "full": sum(g == 2 for g, _ in self.pauses),
                "longest_ms": max(times, default=0.0), "total_ms": sum(times)}
