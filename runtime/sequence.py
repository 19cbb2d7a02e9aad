"""A sequence is one sample of a request; the scheduler and KV manager work on sequences.

A request with `n > 1` starts as one sequence; when its prompt is computed it forks into `n`
sequences that share the prompt's blocks and then live independently.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from runtime.outputs import RequestMetrics, TokenLogprob
from runtime.sampling_params import SamplingParams


class SeqStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    SWAPPED = "swapped"
    FINISHED = "finished"


@dataclass(eq=False, slots=True)  # slots: its fields are read on every step's hot path
class Request:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    arrival_time: float
    priority: int
    metrics: RequestMetrics
    seqs: list[Sequence] = field(default_factory=list)
    rejected_reason: str | None = None
    prompt: tuple[int, ...] | None = None  # the caller's tuple, when it gave one: what per-prompt work is kept by

    @property
    def finished(self) -> bool:
        if self.rejected_reason is not None:
            return True
        for s in self.seqs:  # a loop, not all(): asked for every finishing sequence
            if s.status is not SeqStatus.FINISHED:
                return False
        # An abort before the prompt is computed ends the request with fewer than n sequences (no fork).
        return len(self.seqs) == self.params.n or any(s.finish_reason == "abort" for s in self.seqs)


@dataclass(eq=False, slots=True)  # slots: its fields are read on every step's hot path
class Sequence:
    seq_id: int
    request: Request
    index: int  # sample index within the request
    token_ids: list[int]  # prompt followed by generated tokens
    tier: int
    seed: int
    num_computed_tokens: int = 0  # tokens whose KV is in the cache
    status: SeqStatus = SeqStatus.WAITING
    finish_reason: str | None = None
    prefix_checked: bool = False  # prefix cache consulted since the last (re)admission
    logprobs: list[TokenLogprob] = field(default_factory=list)  # one per output token, where params ask
    num_prompt_tokens: int = field(init=False)  # a plain attribute: read on every step's hot path

    def __post_init__(self) -> None:
        self.num_prompt_tokens = len(self.request.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def num_uncomputed(self) -> int:
        return self.num_tokens - self.num_computed_tokens

    @property
    def is_decode(self) -> bool:
        """True when exactly the last sampled token is left to compute (prompt done)."""
        computed = self.num_computed_tokens
        return len(self.token_ids) - computed == 1 and computed >= self.num_prompt_tokens

