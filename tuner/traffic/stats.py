"""Length statistics of a traffic, for sizing `max_model_len` and reporting.

Percentiles are nearest-rank: the q-th percentile is the smallest logged value that at least q% of
the requests do not exceed (always a value that occurs, an integer, and exactly the share a limit at
that value admits). `max_model_len_candidates` rounds the total-length (prompt + output)
percentiles up to a multiple of 256 (whole KV blocks for every power-of-two block size up to 256),
and gives for each the share of requests it would reject.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from tuner.traffic.requests import TrafficError, TrafficRequest

CANDIDATE_MULTIPLE = 256


class LengthPercentile(NamedTuple):
    q: float  # percent, in (0, 100]
    prompt_tokens: int
    output_tokens: int
    total_tokens: int  # of prompt + output per request (not the sum of the two percentiles)


class MaxLenCandidate(NamedTuple):
    max_model_len: int
    rejected_share: float  # of the requests, needing prompt + output > max_model_len


def _nearest_rank(ordered: Sequence[int], q: float) -> int:
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


def _check(requests: Sequence[TrafficRequest] | Sequence[int], qs: Sequence[float]) -> None:
    if not requests:
        raise TrafficError("length statistics need at least one request")
    for q in qs:
        if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0 < q <= 100:
            raise TrafficError(f"percentiles must be in (0, 100], got {q!r}")


def length_percentiles(requests: Sequence[TrafficRequest],
                       qs: Sequence[float] = (50, 90, 99, 100)) -> tuple[LengthPercentile, ...]:
    """Nearest-rank percentiles of prompt, output and total length, one row per q."""
    _check(requests, qs)
    prompts = sorted(r.prompt_tokens for r in requests)
    outputs = sorted(r.output_tokens for r in requests)
    totals = sorted(r.total_tokens for r in requests)
    return tuple(LengthPercentile(q, _nearest_rank(prompts, q), _nearest_rank(outputs, q),
                                  _nearest_rank(totals, q)) for q in qs)


def max_model_len_candidates(logged_totals: Sequence[int], qs: Sequence[float] = (50, 90, 99, 100),
                             multiple: int = CANDIDATE_MULTIPLE) -> list[MaxLenCandidate]:
    """Distinct max_model_len values (percentiles of prompt + output as logged, rounded up to `multiple`),
    ascending, each with the share of requests it rejects. Pass every request's logged length
    (`TrafficLoad.logged_totals`): the ones the load rejected or truncated too."""
    _check(logged_totals, qs)
    if isinstance(multiple, bool) or not isinstance(multiple, int) or multiple < 1:
        raise TrafficError(f"multiple must be an integer >= 1, got {multiple!r}")
    totals = sorted(logged_totals)
    limits = sorted({-(-_nearest_rank(totals, q) // multiple) * multiple for q in qs})
    return [MaxLenCandidate(limit, sum(t > limit for t in totals) / len(totals)) for limit in limits]


def arrival_rate(requests: Sequence[TrafficRequest]) -> float:
    """Requests per second between the first and the last arrival; inf for a window that arrives at once."""
    if len(requests) < 2:
        return math.inf
    span = requests[-1].arrival_s - requests[0].arrival_s
    return (len(requests) - 1) / span if span > 0 else math.inf


def peak_rate(requests: Sequence[TrafficRequest], window_s: float = 60.0) -> float:
    """The most arrivals in any `window_s` seconds, per second; the whole span's rate for a shorter trace."""
    times = [r.arrival_s for r in requests]
    if len(times) < 2 or times[-1] - times[0] <= window_s:
        return arrival_rate(requests)
    most, start = 0, 0
    for end, t in enumerate(times):
        while t - times[start] > window_s:
            start += 1
        most = max(most, end - start + 1)
    return most / window_s


class ArrivalGroups(NamedTuple):
    """Requests that arrive at one instant with others: no rate scale separates them."""

    requests: int
    instants: int  # distinct arrival times
    grouped: int  # requests that share their arrival time with at least one other
    largest: int  # the most requests at one instant

    @property
    def share(self) -> float:
        return self.grouped / self.requests if self.requests else 0.0

    def line(self) -> str:
        return (f"{self.grouped} of {self.requests} requests ({self.share:.0%}) arrive with others at one instant "
                f"({self.instants} distinct arrival times, up to {self.largest} at once): slowing the trace cannot "
                "separate them, so their prefills share steps with decodes at every rate; if no rate meets the SLO, "
                "the study ranks configs by their p99 at the trace's own rate and proposes an SLO")


GROUPED_SHARE = 0.1  # above this share of grouped requests, the study says so before the search


def arrival_groups(requests: Sequence[TrafficRequest]) -> ArrivalGroups:
    counts: dict[float, int] = {}
    for r in requests:
        counts[r.arrival_s] = counts.get(r.arrival_s, 0) + 1
    grouped = sum(n for n in counts.values() if n > 1)
    return ArrivalGroups(len(requests), len(counts), grouped, max(counts.values(), default=0))
