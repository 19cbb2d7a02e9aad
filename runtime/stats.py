"""Per-step statistics of the engine: the last step's, and running totals in constant memory.

The engine keeps no history: a caller that wants every step reads `LLMEngine.last_step` after each
`step()` (the tuner's replay does, for its step log); `StepTotals` answers the usual aggregate
questions (KV use, waste, preemptions) without one.
"""

from __future__ import annotations

from typing import NamedTuple


class StepStats(NamedTuple):
    time: float
    num_running: int
    num_waiting: int
    num_swapped: int
    num_batched_tokens: int
    num_preempted: int
    kv_used_blocks: int
    kv_total_blocks: int
    kv_cached_blocks: int
    kv_allocated_slots: int
    kv_used_slots: int


class StepTotals:
    """Aggregates over the steps since the engine started or was reset; busy steps computed tokens."""

    def __init__(self) -> None:
        self.steps = 0
        self.busy_steps = 0
        self.preempted = 0  # sequences preempted, summed over steps
        self.swapped_steps = 0  # steps that ended with sequences swapped out
        self.batched_tokens = 0
        self._util_sum = 0.0
        self._waste_sum = 0.0
        self.kv_util_peak = 0.0

    def add(self, s: StepStats) -> None:
        self.steps += 1
        self.preempted += s.num_preempted
        self.swapped_steps += s.num_swapped > 0
        if s.num_batched_tokens == 0:
            return
        self.busy_steps += 1
        self.batched_tokens += s.num_batched_tokens
        util = s.kv_used_blocks / max(1, s.kv_total_blocks)
        self._util_sum += util
        self._waste_sum += (s.kv_allocated_slots - s.kv_used_slots) / max(1, s.kv_allocated_slots)
        self.kv_util_peak = max(self.kv_util_peak, util)

    @property
    def kv_util_mean(self) -> float:
        """Mean share of KV blocks in use over busy steps."""
        return self._util_sum / max(1, self.busy_steps)

    @property
    def kv_waste_mean(self) -> float:
        """Mean share of allocated KV slots holding no token, over busy steps."""
        return self._waste_sum / max(1, self.busy_steps)
