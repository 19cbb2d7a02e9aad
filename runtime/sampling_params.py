"""Per-request sampling parameters (vLLM's names and meanings)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from runtime.config import ConfigError


class RequestOutputKind(enum.Enum):
    """Which steps report a request (vLLM's `RequestOutputKind`, without DELTA)."""

    CUMULATIVE = "cumulative"  # every step that adds tokens, with all its tokens so far
    FINAL_ONLY = "final_only"  # only the step that finishes it (what `LLM.generate` and the tuner read)


@dataclass(frozen=True)
class SamplingParams:
    n: int = 1  # samples per prompt; they share the prompt's KV blocks (fork)
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0
    top_k: int = 0  # 0: no top-k filter
    seed: int | None = None  # per-request seed; None draws from the engine's seed sequence
    max_tokens: int = 16
    ignore_eos: bool = False
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE
    detokenize: bool = True  # fill CompletionOutput.text (only where the engine has a tokenizer)
    skip_special_tokens: bool = True  # leave special tokens (EOS, chat markers) out of the text

    def __post_init__(self) -> None:
        checks = [
            (self.n >= 1, "n", "must be >= 1"),
            (self.temperature >= 0.0, "temperature", "must be >= 0"),
            (0.0 < self.top_p <= 1.0, "top_p", "must be in (0, 1]"),
            (self.top_k >= 0, "top_k", "must be >= 0 (0 disables it)"),
            (self.max_tokens >= 1, "max_tokens", "must be >= 1"),
        ]
        if not isinstance(self.output_kind, RequestOutputKind):
            checks.append((False, "output_kind", f"must be one of {[k.name for k in RequestOutputKind]}"))
        for ok, key, message in checks:
            if not ok:
                raise ConfigError(f"SamplingParams.{key}: {message}, got {getattr(self, key)!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0
