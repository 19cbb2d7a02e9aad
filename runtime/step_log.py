"""A real engine's step log: for the profile's host model and for refitting a profile (`tuner.fidelity=sim+real`).
No torch.

Wraps the engine's step, runner and sampler. A step's device time runs from the runner's call until the
sampled tokens are on the host (the sampler's host lists wait for the device): the work the step-time
model predicts. Its host time is the rest of the step (scheduling, outputs) plus, when the engine stayed
busy, the replay loop's gap since the previous step: what the host model predicts. A step over several
tiers is a row of its first tier with the others' shapes in `others` (they fit the cost of a tier, the
one-tier rows the per-variant coefficients). At most `limit` rows.

    row: runtime.sim.refit.StepRow (variant key, prefill_tokens, prefill_attention, decode_seqs,
         decode_context, seconds, scheduled sequences, host seconds, the further tiers' shapes)
"""

from __future__ import annotations

import time
from typing import Any

from runtime.engine import LLMEngine
from runtime.sim.refit import StepRow
from runtime.sim.shape import StepShaper


class StepLog:
    def __init__(self, engine: LLMEngine, limit: int = 20_000) -> None:
        if engine.overlapped:  # its device time would be the next step's host work too
            raise ValueError("StepLog times synchronous steps: scheduler.async_scheduling must be false")
        self.engine, self.runner, self.sampler = engine, engine.runner, engine.sampler
        runner = engine.runner
        self.shaper = StepShaper(engine.config, engine.kv.tiers, getattr(runner, "graphs", None) is not None,
                                 getattr(runner, "piecewise", None) is not None)
        self.limit = limit
        self.rows: list[StepRow] = []
        self._started: tuple[float, Any] | None = None  # (start, the scheduler's output) of the step in flight
        self._device: tuple[float, Any] | None = None  # (seconds, scheduler's output) of the step's forward
        self._busy_since: float | None = None  # the previous step's end, when the engine stayed busy after it
        self._step = engine.step
        engine.runner, engine.sampler, engine.step = self, self, self._timed_step  # type: ignore[method-assign]

    def _timed_step(self) -> Any:
        start = time.perf_counter()
        gap = 0.0 if self._busy_since is None else start - self._busy_since
        self._device = None
        outputs = self._step()
        end = time.perf_counter()
        if self._device is not None:
            self._log(*self._device, gap + (end - start) - self._device[0])
        self._busy_since = end if self.engine.has_unfinished_requests() else None
        return outputs

    def _log(self, seconds: float, out: Any, host_s: float) -> None:
        parts = self.shaper.parts(out.scheduled)
        if parts and len(self.rows) < self.limit:
            (variant, shape), rest = parts[0], parts[1:]
            others = tuple((v.key, *s) for v, s in rest)
            self.rows.append(StepRow(variant.key, *shape, seconds, len(out.scheduled), host_s, others))

    def execute(self, out: Any) -> Any:
        self._started = (time.perf_counter(), out)
        return self.runner.execute(out)

    def sample(self, logits: Any, rows: Any) -> list[list[int]]:
        tokens = self.sampler.sample(logits, rows)
        if self._started is not None:
            start, out = self._started
            self._device = (time.perf_counter() - start, out)
        self._started = None
        return tokens

    def forget(self, seq_id: int) -> None:
        self.sampler.forget(seq_id)
