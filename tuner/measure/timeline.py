"""What a replay recorded: each request's timeline on the replay clock, and the run's totals."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RequestRecord:
    """One replayed request's life on the replay clock (seconds)."""

    request_id: str
    arrival: float
    first_scheduled: float | None
    first_token: float | None
    finished: float
    token_times: tuple[float, ...]
    prompt_tokens: int
    output_tokens: int  # generated (the logged length unless aborted or rejected)
    cached_tokens: int
    preemptions: int
    rejected_reason: str | None


@dataclass(frozen=True)
class ReplayResult:
    records: tuple[RequestRecord, ...]  # in completion order
    requests: int  # requests in the window (a stopped replay finished fewer)
    duration_s: float  # first arrival to last finish, on the replay clock
    busy_s: float  # real seconds spent (the skipped idle time excluded)
    stopped: bool  # stopped once the SLO could no longer be met (see tuner.measure.replay)
    kv_util_mean: float  # engine totals over busy steps
    kv_util_peak: float
    kv_waste_mean: float
