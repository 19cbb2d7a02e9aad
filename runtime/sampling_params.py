"""Per-request sampling parameters (vLLM's names and meanings)."""

from __future__ import annotations

import enum
from collections.abc import Iterable
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
    # Stop strings: the text ends before the first one (matched where the text is made: runtime.detokenizer);
    # a str or a sequence of them, kept as a tuple. Needs the model's tokenizer.
    stop: str | Iterable[str] | None = None
    stop_token_ids: Iterable[int] | None = None  # sampling one ends the sample as EOS does; kept as a frozenset
    include_stop_str_in_output: bool = False  # keep the stop string (or stop token's text) at the end of the text
    logprobs: int | None = None  # per output token: its log-probability and the `logprobs` most likely tokens'

    def __post_init__(self) -> None:
        # normalized once, here: a tuple and a frozenset (hashable, and `in` is one lookup on the hot path)
        object.__setattr__(self, "stop", tuple([self.stop] if isinstance(self.stop, str) else self.stop or ()))
        object.__setattr__(self, "stop_token_ids", frozenset(self.stop_token_ids or ()))
        checks = [
            (self.n >= 1, "n", "must be >= 1"),
            (self.temperature >= 0.0, "temperature", "must be >= 0"),
            (0.0 < self.top_p <= 1.0, "top_p", "must be in (0, 1]"),
            (self.top_k >= 0, "top_k", "must be >= 0 (0 disables it)"),
            (self.max_tokens >= 1, "max_tokens", "must be >= 1"),
            (all(isinstance(t, str) and t for t in self.stop), "stop", "must be non-empty strings"),
            (all(isinstance(t, int) and t >= 0 for t in self.stop_token_ids), "stop_token_ids",
             "must be token ids (ints >= 0)"),
            (self.logprobs is None or self.logprobs >= 0, "logprobs", "must be >= 0 or None"),
        ]
        if not isinstance(self.output_kind, RequestOutputKind):
            checks.append((False, "output_kind", f"must be one of {[k.name for k in RequestOutputKind]}"))
        for ok, key, message in checks:
            if not ok:
                raise ConfigError(f"SamplingParams.{key}: {message}, got {getattr(self, key)!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0
