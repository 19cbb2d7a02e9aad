"""Serving metrics of a replay: per-request latencies, SLO attainment, goodput, percentiles, KV use.

Definitions (all on the replay clock, seconds):
    TTFT  first token - arrival            (queueing included: open loop)
    TPOT  (finish - first token) / (n - 1) mean time per output token after the first; 0 when n = 1
    ITL   gaps between consecutive tokens
    E2E   finish - arrival
A request's SLO ratio is the largest of TTFT / slo.ttft_s, TPOT / slo.tpot_s (and E2E / slo.e2e_s when
set): it meets the SLO when the ratio is <= 1; a rejected, unfinished or stopped request never does
(ratio inf). Goodput = requests meeting the SLO / replay duration. Attainment = the share of the
window's requests meeting it; `slo_load` = the ratio at the attainment target (nearest rank), so a
replay passes (attainment >= target) exactly when slo_load <= 1.

A replay is decisive, i.e. no repeat could reverse its probe, when it passes with slo_load <=
CLEAR_PASS_LOAD (every bound met with half to spare at the target), or when it fails with at least
`decisive_failures` requests missing the SLO. A replay stops early once its verdict can no longer change
what its probe decides (`stop_after_misses`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tuner.config import SloConfig
from tuner.measure.job import ReplaySummary
from tuner.measure.timeline import ReplayResult, RequestRecord

PERCENTILES = (50, 90, 99)
CLEAR_PASS_LOAD = 0.5


def allowed_failures(requests: int, slo: SloConfig) -> int:
    """Requests that may miss the SLO while attainment still holds."""
    return math.floor((1.0 - slo.attainment) * requests + 1e-9)


def certain_failures(requests: int, slo: SloConfig) -> int:
    """Misses that fail a replay whatever its other requests do: one more than attainment allows."""
    return allowed_failures(requests, slo) + 1


def decisive_failures(requests: int, slo: SloConfig) -> int:
    """Misses that make a failing replay decisive: three times past what attainment allows."""
    return 3 * certain_failures(requests, slo)


def stop_after_misses(requests: int, slo: SloConfig, repeats: int) -> int:
    """Misses after which a replay of a probe of at most `repeats` replays stops. With one replay the probe's
    verdict is that replay's alone, and it is certain at the first miss past what attainment allows. With
    repeats, at a decisive failure: the probe needs no repeat then, and a repeat could still reverse a failure
    stopped earlier. A stopped replay's figures (attainment, percentiles) are of the requests finished by then."""
    return certain_failures(requests, slo) if repeats == 1 else decisive_failures(requests, slo)


def latency_row(r: RequestRecord) -> dict[str, Any]:
    """One request's latencies (a row of the latencies.csv artifact); None where it has no tokens."""
    done = r.rejected_reason is None and r.first_token is not None
    n = r.output_tokens
    return {
        "request_id": r.request_id,
        "arrival_s": r.arrival,
        "prompt_tokens": r.prompt_tokens,
        "output_tokens": n,
        "cached_tokens": r.cached_tokens,
        "preemptions": r.preemptions,
        "queue_s": (r.first_scheduled - r.arrival) if r.first_scheduled is not None else None,
        "ttft_s": (r.first_token - r.arrival) if done else None,
        "tpot_s": ((r.finished - r.first_token) / (n - 1) if n > 1 else 0.0) if done else None,
        "e2e_s": (r.finished - r.arrival) if done else None,
        "rejected": r.rejected_reason or "",
    }


def slo_ratio(row: dict[str, Any], slo: SloConfig) -> float:
    """The largest latency / bound of a request; inf when it has no latency (rejected)."""
    if row["rejected"] or row["ttft_s"] is None:
        return math.inf
    ratio = max(row["ttft_s"] / slo.ttft_s, row["tpot_s"] / slo.tpot_s)
    return ratio if slo.e2e_s is None else max(ratio, row["e2e_s"] / slo.e2e_s)


def meets_slo(row: dict[str, Any], slo: SloConfig) -> bool:
    return slo_ratio(row, slo) <= 1.0


def _percentiles(name: str, values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {f"{name}_p{q}_s": float("nan") for q in PERCENTILES}
    arr = np.asarray(values, dtype=np.float64)
    return {f"{name}_p{q}_s": float(np.percentile(arr, q)) for q in PERCENTILES}


def at_attainment(values: Sequence[float | None], attainment: float, count: int | None = None) -> float:
    """The value that `attainment` of `count` requests (default: one per value) do not exceed, by nearest rank;
    a None, and a request of `count` with no value (never finished), counts as inf. Nothing to rank: inf."""
    count = len(values) if count is None else count
    ordered = sorted(math.inf if v is None else v for v in values) + [math.inf] * (count - len(values))
    return ordered[max(1, math.ceil(attainment * count - 1e-9)) - 1] if ordered else math.inf


def summarize(result: ReplayResult, slo: SloConfig, peak_memory_gb: float) -> dict[str, float]:
    """Every aggregate metric of one replay, by name (the names MLflow, reports and plots use)."""
    return _summarize(result, [latency_row(r) for r in result.records], slo, peak_memory_gb)


def _summarize(result: ReplayResult, rows: Sequence[dict[str, Any]], slo: SloConfig,
               peak_memory_gb: float) -> dict[str, float]:
    done = [r for r in rows if r["ttft_s"] is not None]
    ratios = [slo_ratio(r, slo) for r in rows]
    good = sum(x <= 1.0 for x in ratios)
    itl = [b - a for r in result.records for a, b in zip(r.token_times, r.token_times[1:])]
    duration = result.duration_s
    prompt = sum(r.prompt_tokens for r in result.records if r.rejected_reason is None)  # rejected: never cached
    metrics = {
        "requests": float(result.requests),
        "completed": float(len(done)),
        "rejections": float(len(rows) - len(done)),
        "duration_s": duration,
        "busy_s": result.busy_s,
        "stopped": float(result.stopped),
        "throughput_rps": len(done) / duration,
        "output_tok_s": sum(r["output_tokens"] for r in done) / duration,
        "goodput_rps": good / duration,
        "slo_attainment": good / max(1, result.requests),
        "slo_load": at_attainment(ratios, slo.attainment, result.requests),  # the ratio at the attainment target
        "prefix_hit_rate": sum(r.cached_tokens for r in result.records) / max(1, prompt),
        "preemptions": float(sum(r.preemptions for r in result.records)),
        "peak_memory_gb": peak_memory_gb,
        "kv_util_mean": result.kv_util_mean,
        "kv_util_peak": result.kv_util_peak,
        "kv_waste_mean": result.kv_waste_mean,
    }
    metrics |= _percentiles("ttft", [r["ttft_s"] for r in done])
    metrics |= _percentiles("tpot", [r["tpot_s"] for r in done if r["output_tokens"] > 1])
    metrics |= _percentiles("e2e", [r["e2e_s"] for r in done])
    metrics |= _percentiles("itl", itl)
    return metrics


def replay_summary(result: ReplayResult, scale: float, slo: SloConfig, peak_memory_gb: float) -> ReplaySummary:
    """A measured replay with its SLO verdict and whether it is decisive."""
    rows = tuple(latency_row(r) for r in result.records)
    metrics = _summarize(result, rows, slo, peak_memory_gb)
    passed = metrics["slo_attainment"] >= slo.attainment
    misses = result.requests - round(metrics["slo_attainment"] * result.requests)
    decisive = metrics["slo_load"] <= CLEAR_PASS_LOAD if passed else \
        misses >= decisive_failures(result.requests, slo)
    return ReplaySummary(scale, passed, decisive, metrics, rows)
