"""Choosing what to replay: a time window, a seeded sample, a cap, a rate scale; and the split into a
search window and a held-out validation window.

Order in `select`: window (on the trace's own clock) -> sample -> max_requests (the earliest) ->
re-base (the first selected request arrives at 0.0) -> time_scale, which divides every arrival time:
2.0 replays the same requests at twice the rate, 0.5 at half.

Sampling keeps the `sample` share of the window's requests (rounded half up, at least one), picked
by a blake2b hash of (seed, request_id): the same seed picks the same requests on every machine, and
a larger share keeps a superset of a smaller one.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import replace
from typing import NamedTuple

from tuner.traffic.requests import TrafficError, TrafficRequest


def select(requests: Sequence[TrafficRequest], *, start_s: float = 0.0, duration_s: float | None = None,
           max_requests: int | None = None, sample: float | None = None, seed: int = 0,
           time_scale: float = 1.0) -> tuple[TrafficRequest, ...]:
    """The requests to replay, re-based to 0.0 and scaled; an empty selection is an error."""
    _check(_finite(start_s) and start_s >= 0, f"start_s must be >= 0, got {start_s}")
    _check(duration_s is None or (_finite(duration_s) and duration_s > 0),
           f"duration_s must be > 0, got {duration_s}")
    _check(max_requests is None or (_whole(max_requests) and max_requests >= 1),
           f"max_requests must be an integer >= 1, got {max_requests}")
    _check(sample is None or (_finite(sample) and 0 < sample <= 1), f"sample must be in (0, 1], got {sample}")
    _check(_whole(seed), f"seed must be an integer, got {seed!r}")
    _check(_finite(time_scale) and time_scale > 0, f"time_scale must be > 0, got {time_scale}")
    end = math.inf if duration_s is None else start_s + duration_s
    chosen = [r for r in requests if start_s <= r.arrival_s < end]
    if sample is not None and chosen:
        chosen = _sample(chosen, sample, seed)
    if max_requests is not None:
        chosen = chosen[:max_requests]
    if not chosen:
        window = f"[{start_s}, {end}) s" if duration_s is not None else f"from {start_s} s"
        raise TrafficError(f"no request of the {len(requests)} arrives in the window {window}")
    return rebase(chosen, time_scale)


def rebase(requests: Sequence[TrafficRequest], time_scale: float = 1.0) -> tuple[TrafficRequest, ...]:
    """Shift arrivals so the first is 0.0, then divide them by time_scale."""
    start = requests[0].arrival_s if requests else 0.0
    return tuple(replace(r, arrival_s=(r.arrival_s - start) / time_scale) for r in requests)


def _sample(requests: list[TrafficRequest], share: float, seed: int) -> list[TrafficRequest]:
    count = max(1, _round_half_up(share * len(requests)))
    ranked = sorted(range(len(requests)), key=lambda i: _rank(seed, requests[i].request_id))
    return [requests[i] for i in sorted(ranked[:count])]  # back in arrival order


def _rank(seed: int, request_id: str) -> bytes:
    return hashlib.blake2b(f"{seed}\0{request_id}".encode(), digest_size=8).digest()


class ReplayWindow(NamedTuple):
    """A window as a trial replays it."""

    key: str  # "search" | "validation": the name the worker keeps its requests under
    requests: tuple[TrafficRequest, ...]  # re-based to 0.0, replay.time_scale applied
    rate_rps: float  # its arrival rate as replayed: a trial's rate scale 1.0

    @property
    def span_s(self) -> float:
        """First arrival to last, as replayed (0.0 for an empty window)."""
        return self.requests[-1].arrival_s - self.requests[0].arrival_s if self.requests else 0.0


class Windows(NamedTuple):
    search: tuple[TrafficRequest, ...]  # what the study tunes on
    validation: tuple[TrafficRequest, ...]  # later, never seen by the search; empty when the fraction is 0


def split_windows(requests: Sequence[TrafficRequest], holdout_fraction: float, min_held_s: float = 0.0) -> Windows:
    """Split by time: the requests of the last `holdout_fraction` of the selection's duration, and at least its
    last `min_held_s` seconds (at least one request when the fraction is > 0), are the validation window. Both
    windows are re-based to 0.0. Sized by time, not by a share of requests: a capacity is a rate held over a
    duration. Contiguous windows keep the trace's bursts, which a random split would smear."""
    _check(_finite(holdout_fraction) and 0 <= holdout_fraction < 1,
           f"holdout_fraction must be in [0, 1), got {holdout_fraction}")
    if holdout_fraction == 0 or not requests:
        return Windows(rebase(requests), ())
    last = requests[-1].arrival_s
    span = last - requests[0].arrival_s
    cut = last - max(holdout_fraction * span, min_held_s)
    held = max(1, sum(r.arrival_s >= cut for r in requests))
    if held < len(requests) and last - requests[-held].arrival_s < min_held_s:
        held += 1  # the request before the cut too: the window then spans `min_held_s` at least
    _check(len(requests) - held >= 1,
           f"cannot hold out the last {max(holdout_fraction * span, min_held_s):.4g} s of a {span:.4g} s selection "
           f"({len(requests)} requests) and keep any for the search")
    cut_at = len(requests) - held
    return Windows(rebase(requests[:cut_at]), rebase(requests[cut_at:]))


def _round_half_up(x: float) -> int:
    return math.floor(x + 0.5)  # not round(): banker's rounding would make 2.5 -> 2 but 3.5 -> 4


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise TrafficError(message)


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
