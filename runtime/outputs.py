"""What the engine hands back: per-request outputs with their timing metrics."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)  # slots: written on every step's hot path
class RequestMetrics:
    """Engine-clock timestamps (seconds) of one request's life; filled in as it progresses."""

    arrival_time: float
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    token_times: list[float] = field(default_factory=list)  # one per output token of sample 0
    finished_time: float | None = None
    num_preemptions: int = 0
    num_cached_tokens: int = 0  # prompt tokens served from the prefix cache


@dataclass(frozen=True)
class CompletionOutput:
    index: int
    token_ids: list[int]
    finish_reason: str | None  # "length" | "stop" | "abort" | "rejected" | None while running
    text: str | None = None  # the tokens' text so far; None: not detokenized (no tokenizer, or detokenize=False)


@dataclass(frozen=True)
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    metrics: RequestMetrics
    rejected_reason: str | None = None
