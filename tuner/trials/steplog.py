"""The real engine's step log, for refitting a GPU profile (`tuner.fidelity=sim+real`). No torch.

Wraps the engine's runner and sampler: a step is timed from the runner's call until the sampled tokens
are on the host (the sampler's host lists wait for the device), the work the step-time model predicts.
Only one-tier steps are kept (the model is fitted per variant), at most `limit` of them.

    row: (variant key, prefill_tokens, prefill_attention, decode_seqs, decode_context, seconds)
"""

from __future__ import annotations

import time
from typing import Any

from runtime import LLMEngine, StepShaper

StepRow = tuple[str, int, int, int, int, float]


class StepLog:
    def __init__(self, engine: LLMEngine, limit: int = 20_000) -> None:
        self.runner, self.sampler = engine.runner, engine.sampler
        self.shaper = StepShaper(engine.config, engine.kv.tiers, getattr(engine.runner, "graphs", None) is not None)
        self.limit = limit
        self.rows: list[StepRow] = []
        self._started: tuple[float, Any] | None = None  # (start, the scheduler's output) of the step in flight
        engine.runner, engine.sampler = self, self

    def execute(self, out: Any) -> Any:
        self._started = (time.perf_counter(), out)
        return self.runner.execute(out)

    def sample(self, logits: Any, rows: Any) -> list[list[int]]:
        tokens = self.sampler.sample(logits, rows)
        if self._started is not None:
            start, out = self._started
            seconds = time.perf_counter() - start
            parts = self.shaper.parts(out.scheduled)
            if len(parts) == 1 and len(self.rows) < self.limit:
                variant, shape = parts[0]
                self.rows.append((variant.key, *shape, seconds))
        self._started = None
        return tokens

    def forget(self, seq_id: int) -> None:
        self.sampler.forget(seq_id)
