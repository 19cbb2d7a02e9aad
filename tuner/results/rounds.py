"""How many rounds the conclusion spends on each window, by what the executor's measurements can vary by.

Rounds exist to average noise. On a real device (or a server) a replay varies from one run to the next, and
every round counts. A simulated replay is deterministic: two rounds of one config differ only by their
dithered start, i.e. where the capacity bisection's grid falls inside its `tuner.capacity_tol` bracket.

    select   simulated: 1 round. A second would move each finalist's value within its own bracket only, so
             it could only reorder configs that the instrument's tolerance cannot tell apart anyway.
    prove    `validation.proof_rounds` on every executor. The verdict's paired interval reads the rounds'
             spread; simulated, that spread is the dither's grid error, which is what keeps a difference
             smaller than the tolerance from being called an improvement. Fewer rounds would widen the
             interval by t(n-1)/sqrt(n) and could turn a verdict near the tolerance.
"""

from __future__ import annotations

from typing import NamedTuple

from tuner.config import ValidationConfig
from tuner.executors.sim import SimExecutor

__all__ = ["Rounds", "conclusion_rounds"]


class Rounds(NamedTuple):
    select: int  # interleaved rounds of the finalists and the baseline on the search window
    proof: int  # interleaved rounds of the pick and the baseline on the proof window


def conclusion_rounds(executor: object, validation: ValidationConfig) -> Rounds:
    deterministic = isinstance(executor, SimExecutor)
    return Rounds(1 if deterministic else validation.select_rounds, validation.proof_rounds)
