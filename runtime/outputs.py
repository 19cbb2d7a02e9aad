"""What the engine hands back: per-request outputs with their timing metrics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


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


class TokenLogprob(NamedTuple):
    """One output token's log-probability under the model's raw logits (before temperature, top-k, top-p,
    as vLLM's default `raw_logprobs`), and the most likely tokens' (`SamplingParams.logprobs` of them)."""

    token_id: int
    logprob: float
    top_ids: tuple[int, ...]  # in decreasing probability
    top_logprobs: tuple[float, ...]


@dataclass(frozen=True)
class CompletionOutput:
    index: int
    token_ids: list[int]
    finish_reason: str | None  # "length" | "stop" | "abort" | "rejected" | None while running
    text: str | None = None  # the tokens' text so far; None: not detokenized (no tokenizer, or detokenize=False)
    logprobs: list[TokenLogprob] | None = None  # one per token id, where SamplingParams.logprobs asked


@dataclass(frozen=True)
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    metrics: RequestMetrics
    rejected_reason: str | None = None
