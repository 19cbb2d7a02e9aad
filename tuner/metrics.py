"""Serving metrics of a replay: per-request latencies, SLO attainment, goodput, percentiles, KV use.

Definitions (all on the replay clock, seconds):
    TTFT  first token - arrival            (queueing included: open loop)
    TPOT  (finish - first token) / (n - 1) mean time per output token after the first; 0 when n = 1
    ITL   gaps between consecutive tokens
    E2E   finish - arrival
A request meets the SLO when TTFT <= slo.ttft_s, TPOT <= slo.tpot_s (and E2E <= slo.e2e_s when
set); a rejected request never does. Goodput = requests meeting the SLO / replay duration.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tuner.config import SloConfig
from tuner.replay import ReplayResult, RequestRecord

PERCENTILES = (50, 90, 99)


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


def meets_slo(row: dict[str, Any], slo: SloConfig) -> bool:
    if row["rejected"] or row["ttft_s"] is None:
        return False
    ok = row["ttft_s"] <= slo.ttft_s and row["tpot_s"] <= slo.tpot_s
    return ok and (slo.e2e_s is None or row["e2e_s"] <= slo.e2e_s)


def goodput(records: Sequence[RequestRecord], slo: SloConfig) -> float:
    """Requests meeting the SLO per second of replay (first arrival to last finish); also on a partial replay."""
    if not records:
        return 0.0
    span = max(r.finished for r in records) - min(r.arrival for r in records)
    return sum(meets_slo(latency_row(r), slo) for r in records) / max(span, 1e-9)


def _percentiles(name: str, values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {f"{name}_p{q}_s": float("nan") for q in PERCENTILES}
    arr = np.asarray(values, dtype=np.float64)
    return {f"{name}_p{q}_s": float(np.percentile(arr, q)) for q in PERCENTILES}


def _kv_metrics(result: ReplayResult) -> dict[str, float]:
    busy = [s for s in result.step_stats if s.num_batched_tokens > 0]
    if not busy:
        return {"kv_util_mean": 0.0, "kv_waste_mean": 0.0, "kv_util_peak": 0.0}
    util = [s.kv_used_blocks / max(1, s.kv_total_blocks) for s in busy]
    waste = [(s.kv_allocated_slots - s.kv_used_slots) / max(1, s.kv_allocated_slots) for s in busy]
    return {"kv_util_mean": float(np.mean(util)), "kv_waste_mean": float(np.mean(waste)),
            "kv_util_peak": float(np.max(util))}


def summarize(result: ReplayResult, slo: SloConfig, peak_memory_gb: float) -> dict[str, float]:
    """Every aggregate metric of one replay, by name (the names MLflow, reports and plots use)."""
    rows = [latency_row(r) for r in result.records]
    done = [r for r in rows if r["ttft_s"] is not None]
    good = sum(meets_slo(r, slo) for r in rows)
    itl = [b - a for r in result.records for a, b in zip(r.token_times, r.token_times[1:])]
    duration = result.duration_s
    prompt = sum(r.prompt_tokens for r in result.records if r.rejected_reason is None)  # rejected: never cached
    metrics = {
        "requests": float(len(rows)),
        "completed": float(len(done)),
        "rejections": float(len(rows) - len(done)),
        "duration_s": duration,
        "busy_s": result.busy_s,
        "throughput_rps": len(done) / duration,
        "output_tok_s": sum(r["output_tokens"] for r in done) / duration,
        "goodput_rps": goodput(result.records, slo),
        "slo_attainment": good / max(1, len(rows)),
        "prefix_hit_rate": sum(r.cached_tokens for r in result.records) / max(1, prompt),
        "preemptions": float(sum(r.preemptions for r in result.records)),
        "peak_memory_gb": peak_memory_gb,
    }
    metrics |= _percentiles("ttft", [r["ttft_s"] for r in done])
    metrics |= _percentiles("tpot", [r["tpot_s"] for r in done if r["output_tokens"] > 1])
    metrics |= _percentiles("e2e", [r["e2e_s"] for r in done])
    metrics |= _percentiles("itl", itl)
    metrics |= _kv_metrics(result)
    metrics["slo_met"] = float(metrics["slo_attainment"] >= slo.attainment)
    return metrics
