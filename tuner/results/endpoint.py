"""A deployed server measured (`replay.target`): its own config, once, on the selected traffic; no search.

    describe the endpoint (GET /models) -> one measurement (HttpExecutor: the in-process trial's measurement,
    replays over HTTP) -> report.md (what was measured, where, how; the figures) -> MLflow: a parent run for
    the endpoint and one child run (latencies.csv), as a study's trial -> the console's lines

Nothing is exported but the report: the server's knobs are its own, and none was tried here. The MLflow
parent is named `<traffic>@<host:port>` (or tuner.study_name): measuring the same endpoint again on the
same traffic replaces its child run.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from tuner.config import AppConfig, Measuring, ObjectiveName, traffic_stem
from tuner.console import Console
from tuner.executors.http import HttpExecutor
from tuner.measure.job import Hardware, TrialJob, TrialOutcome, TrialStatus
from tuner.measure.outcome import trial_metrics
from tuner.measure.plan import Rates, plan_for
from tuner.redact import mask_url
from tuner.tracking import STATUS_TAG, FallbackTracker, RunState, Tracker, open_tracker
from tuner.traffic import ReplayWindow, TrafficLoad

__all__ = ["endpoint_report", "measure_endpoint"]

FIGURES = (("ttft_p50_s", "TTFT p50 (s)"), ("ttft_p99_s", "TTFT p99 (s)"), ("tpot_p50_s", "TPOT p50 (s)"),
           ("tpot_p99_s", "TPOT p99 (s)"), ("e2e_p99_s", "E2E p99 (s)"), ("itl_p99_s", "ITL p99 (s)"),
           ("output_tok_s", "output tok/s"), ("throughput_rps", "completed req/s"),
           ("slo_attainment", "SLO attainment"), ("rejections", "rejected requests"), ("probes", "probes"),
           ("replays", "replays"), ("replay_busy_s", "replay wall time (s)"))


def measure_endpoint(app: AppConfig, traffic: TrafficLoad, window: ReplayWindow, rates: Rates,
                     executor: HttpExecutor, hardware: Hardware, console: Console, out_dir: Path) -> int:
    """Measure the endpoint; 0 when it was measured, 1 when the measurement failed (the reason is printed).
    Tracking is checked first: TrackingError before any request is sent."""
    tracker = open_tracker(app.tracking, app.storage.retry_s, out_dir)
    console.line(f"endpoint: {hardware.summary}: its own config, measured once on {len(window.requests)} requests "
                 "(nothing searched, no best.yaml)")
    job = TrialJob(0, app.runtime, None, window.key, plan_for(app.measuring, None, repeats=app.tuner.repeats,
                                                                 checkpoint=False))
    console.start_trials(1, 0, len(window.requests))
    outcome = executor.run(job, window.requests, lambda *p: console.progress(0, *p), lambda probe: True,
                           app.tuner.trial_timeout_s)
    console.end_trials()
    metrics = trial_metrics(app.tuner.objective, outcome, rates)
    headline = _headline(app.tuner.objective, outcome, metrics)
    report = out_dir / "report.md"
    report.write_text(endpoint_report(app.measuring, app.replay.time_scale, traffic, window, hardware, headline,
                                      metrics), encoding="utf-8")
    target = mask_url(app.replay.target or "")
    name = app.tuner.study_name or f"{traffic_stem(traffic.path)}@{urlsplit(target).netloc}"
    _track(tracker, name, target, traffic, hardware, outcome, metrics, report, headline)
    console.lines([headline, f"report: {report}"])
    return 0 if outcome.status is TrialStatus.ok else 1


def _headline(objective: ObjectiveName, outcome: TrialOutcome, metrics: dict[str, float]) -> str:
    if outcome.status is not TrialStatus.ok:
        return f"endpoint: {outcome.status.value.upper()}: {outcome.reason}"
    if objective is ObjectiveName.capacity:
        bound = " (the SLO held at every rate the window allows)" if metrics.get("saturated") else ""
        return (f"endpoint: capacity {metrics['capacity_rps']:.4g} req/s = x{metrics['capacity_x_trace']:.3g} the "
                f"trace's rate{bound}; TTFT p99 {metrics['ttft_p99_s']:.3g} s, TPOT p99 {metrics['tpot_p99_s']:.3g} s")
    return (f"endpoint: goodput {metrics['goodput_rps']:.4g} req/s, attainment {metrics['slo_attainment']:.3f}, "
            f"output {metrics['output_tok_s']:.4g} tok/s, E2E p99 {metrics['e2e_p99_s']:.3g} s")


def endpoint_report(measuring: Measuring, time_scale: float, traffic: TrafficLoad, window: ReplayWindow,
                    hardware: Hardware, headline: str, metrics: dict[str, float]) -> str:
    slo, tuner = measuring.slo, measuring.tuner
    lines = [
        "# pagetune: a deployed server measured", "", headline, "",
        "## What was measured, and where", "",
        f"- **Where**: {hardware.versions}, serving `{hardware.name}`, with its own configuration: nothing was "
        "searched, and no best.yaml is written.",
        f"- **Traffic**: `{traffic.path}` (sha256 {traffic.sha256[:12]}, {traffic.format}): {len(window.requests)} "
        f"requests at {window.rate_rps:.4g} req/s as replayed (replay.time_scale {time_scale:g}).",
        f"- **SLO**: TTFT <= {slo.ttft_s:g} s, TPOT <= {slo.tpot_s:g} s"
        + (f", E2E <= {slo.e2e_s:g} s" if slo.e2e_s else "") + f", for {slo.attainment:.0%} of requests.",
        f"- **Objective**: {tuner.objective.value}; up to {tuner.repeats} replays per probe (majority), "
        f"{tuner.warmup_requests} warm-up requests first.",
        "- **How**: open-loop replay over HTTP: each request sent at its arrival time as a streamed "
        "`/completions` call (prompt as token ids, `max_tokens` its logged output length, greedy, `ignore_eos`, "
        "`stream_options.include_usage`); TTFT and TPOT from the stream's chunks, token counts from the usage. "
        "Idle gaps (no request open) are skipped, as in-process.",
        "- **Not seen from outside**: the server's KV use, preemptions and memory (pagetune's server has them at "
        "`/metrics`).", "", "## Figures", "", "| metric | value |", "|---|---|"]
    lines += [f"| {label} | {metrics[key]:.4g} |" for key, label in FIGURES if key in metrics]
    return "\n".join(lines) + "\n"


def _track(tracker: Tracker | FallbackTracker, name: str, target: str, traffic: TrafficLoad, hardware: Hardware,
           outcome: TrialOutcome, metrics: dict[str, float], report: Path, headline: str) -> None:
    """One parent run (`name`) for the endpoint (`target`, masked) and traffic, one child run for this measurement."""
    tags = {"pagetune.target": target, "pagetune.served_model": hardware.name,
            "pagetune.traffic_sha256": traffic.sha256}
    parent = tracker.start_study(name, f"replay.target: {target}\n", tags)
    run = tracker.begin_trial(parent, 0, {}, f"served_model: {hardware.name}\n", {})
    state = RunState.FINISHED if outcome.status is TrialStatus.ok else RunState.FAILED
    rows = list(outcome.measurement.latency_rows) if outcome.measurement else []
    tracker.end_trial(run, metrics, state, outcome.reason, rows, {STATUS_TAG: outcome.status.value})
    tracker.log_study_artifacts(parent, [report], metrics, {"pagetune.verdict": headline})
    tracker.finish_study(parent, state)
