"""The records the traffic layer hands to the rest of the tuner, its error type and its limits."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

MAX_TOKENS = 10_000_000  # a length above this is a broken log, not a request (a 10M-token prompt is ~40 MB)
MAX_LINE_BYTES = 16 * 1024 * 1024  # a longer line is an error, read in bounded chunks (never a MemoryError)
MAX_LISTED_SKIPS = 1000  # skipped lines beyond this are counted but not listed, so garbage stays cheap


class TrafficError(ValueError):
    """A traffic file or a traffic argument is wrong; the message starts with `file:line:` or `file:`."""


@dataclass(frozen=True)
class TrafficRequest:
    """One request to replay: when it arrives, what it sends, how many tokens it must generate."""

    request_id: str  # stable: "<file stem>:<line>" or the log's own id when it has one
    arrival_s: float  # seconds since the trace's first request (first is 0.0), sorted ascending
    prompt_token_ids: tuple[int, ...]
    output_tokens: int  # the logged output length (replay forces it)
    source: str  # "path:line" it came from, for messages
    priority: int = 0  # lower runs first under the runtime's priority policy

    def __post_init__(self) -> None:
        # Cheap checks only: the token ids were validated (or synthesized in range) by the loader.
        if not (math.isfinite(self.arrival_s) and self.arrival_s >= 0):
            raise TrafficError(f"{self.source}: arrival_s must be finite and >= 0, got {self.arrival_s}")
        if not self.prompt_token_ids:
            raise TrafficError(f"{self.source}: the prompt is empty")
        if self.output_tokens < 1:
            raise TrafficError(f"{self.source}: output_tokens must be >= 1, got {self.output_tokens}")

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def total_tokens(self) -> int:
        """What the request needs of `max_model_len`: prompt plus forced output."""
        return len(self.prompt_token_ids) + self.output_tokens


class SkippedLine(NamedTuple):
    source: str  # "path:line"
    reason: str  # what is wrong with it


@dataclass(frozen=True)
class TrafficLoad:
    """What `load_traffic` read: the requests and an account of everything it dropped or changed."""

    requests: tuple[TrafficRequest, ...]  # sorted by arrival, first at 0.0
    skipped: tuple[SkippedLine, ...]  # bad lines dropped in skip mode (the first MAX_LISTED_SKIPS)
    skipped_count: int  # all bad lines dropped, listed or not
    rejected_too_long: int  # prompt + output > max_model_len under "reject"; output >= max_model_len always
    truncated: int  # prompts cut to fit max_model_len (long_prompts="truncate")
    out_of_order: int  # requests logged after a later timestamp; they were sorted (stably) into place
    format: str  # native | mooncake | azure | openai
    sha256: str  # of the file's bytes as stored
    path: str
    logged_totals: tuple[int, ...] = ()  # prompt + output as logged, of every valid request, kept or not

    @property
    def rejected_share(self) -> float:
        """The share of valid requests rejected as longer than max_model_len."""
        return self.rejected_too_long / max(1, self.rejected_too_long + len(self.requests))

    def summary(self) -> str:
        """One line for the console: what was read, and everything dropped or changed, with its share."""
        parts = [f"{len(self.requests)} requests from {self.path} ({self.format}, sha256 {self.sha256[:12]})"]
        valid = len(self.requests) + self.rejected_too_long
        for count, what in ((self.skipped_count, "bad lines skipped"),
                            (self.rejected_too_long, "rejected as longer than max_model_len"),
                            (self.truncated, "truncated to max_model_len"),
                            (self.out_of_order, "out of order, sorted")):
            if count:
                parts.append(f"{count} {what} ({count / max(1, valid):.1%})")
        return "; ".join(parts)
