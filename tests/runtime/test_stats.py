"""Step totals: KV use and waste averaged over busy steps, peaks, preemptions, in constant memory."""

from __future__ import annotations

from runtime import StepStats, StepTotals


def step(batched: int, used: int, total: int, allocated: int, slots: int, preempted: int = 0,
         swapped: int = 0) -> StepStats:
    return StepStats(0.0, 0, 0, swapped, batched, preempted, used, total, 0, allocated, slots)


def test_totals_average_the_busy_steps_only():
    totals = StepTotals()
    for s in (step(48, 2, 8, 32, 24, preempted=1),  # util 1/4, waste 8/32
              step(3, 4, 8, 64, 60, swapped=2),  # util 1/2, waste 4/64
              step(0, 0, 8, 0, 0, preempted=2)):  # idle: not averaged, but its preemptions count
        totals.add(s)
    assert (totals.steps, totals.busy_steps, totals.batched_tokens) == (3, 2, 51)
    assert (totals.kv_util_mean, totals.kv_util_peak, totals.kv_waste_mean) == (0.375, 0.5, 0.15625)
    assert (totals.preempted, totals.swapped_steps) == (3, 1)
    assert (StepTotals().kv_util_mean, StepTotals().kv_waste_mean) == (0.0, 0.0)
