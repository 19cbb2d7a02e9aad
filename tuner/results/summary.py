"""What a finished study leaves behind, from its conclusion: the report's inputs, the study plots, the
console's closing summary (the report's headline, word for word), and best.yaml's metadata."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from tuner.config import Measuring, ObjectiveName, SloConfig
from tuner.console import inversion_note
from tuner.deployment import deployment_line, deployment_meta
from tuner.inputs import grouped_arrivals
from tuner.measure.plan import Rates
from tuner.redact import mask_text, mask_url
from tuner.results import plots
from tuner.results.conclude import Conclusion
from tuner.results.export import ExportPaths, provenance
from tuner.results.finalists import BASELINE
from tuner.results.report import ReportInputs, headline_lines, verdict_text
from tuner.results.shift import window_shift_notes
from tuner.store.record import INTERRUPTED
from tuner.study_run import StudyRun
from tuner.traffic import ReplayWindow, TrafficLoad, max_model_len_candidates

__all__ = ["export_metadata", "report_inputs", "study_history", "study_metrics", "study_plots",
           "summary_lines"]


def _slo(slo: SloConfig) -> str:
    bounds = [f"TTFT <= {slo.ttft_s:g} s", f"TPOT <= {slo.tpot_s:g} s"]
    if slo.e2e_s is not None:
        bounds.append(f"E2E <= {slo.e2e_s:g} s")
    return ", ".join(bounds) + f", attainment {slo.attainment:.1%}"


def _windows(search: ReplayWindow, held_out: ReplayWindow | None) -> str:
    text = f"search {len(search.requests)} requests at {search.rate_rps:.4g} req/s"
    if held_out is not None:
        text += f"; held out {len(held_out.requests)} requests at {held_out.rate_rps:.4g} req/s"
    return text + " (as replayed)"


def capacity_reading(objective: ObjectiveName, c: Conclusion, rates: Rates, devices: int = 1) -> list[str]:
    """The exported capacity as x the trace's recorded rate and replicas at its peak (search window units)."""
    value = c.selection.median(c.exported.label)
    if objective is not ObjectiveName.capacity or not value:
        return []
    reading = rates.capacity(value / rates.window_rps)
    unit = "replica(s)" if devices == 1 else f"deployment(s) of {devices} devices"
    return [f"On the search window: {value:.4g} req/s = {reading['capacity_x_trace']:.3g}x the trace's recorded "
            f"rate; the trace's peak ({rates.peak_rps:.4g} req/s over 60 s) needs "
            f"{reading['replicas_at_peak']:.0f} {unit}"]


def trial_counts(trials: Sequence[optuna.trial.FrozenTrial]) -> str:
    """Measured, stopped, failed (interrupted by a signal, lost with a dead worker), and retried."""
    states = {s: sum(t.state is s for t in trials) for s in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)}
    failed = [t for t in trials if t.state is TrialState.FAIL]
    interrupted = sum(t.user_attrs.get("status") == INTERRUPTED for t in failed)
    lost = sum("status" not in t.user_attrs for t in failed)  # failed by the heartbeat: no outcome came back
    retried = {n for t in trials for n in t.system_attrs.get("retry_history", ())}
    return (f"{len(trials)} trials: {states[TrialState.COMPLETE]} measured, {states[TrialState.PRUNED]} stopped at "
            f"the incumbent's capacity, {states[TrialState.FAIL]} failed ({interrupted} interrupted, {lost} lost with "
            f"their worker), {len(retried)} retried")


def _search_lines(study: optuna.Study) -> list[str]:
    trials = study.get_trials(deepcopy=False)
    lines = [trial_counts(trials)]
    cost = [t.duration.total_seconds() for t in trials if t.duration is not None]
    if cost:
        lines.append(f"wall time per trial: median {statistics.median(cost):.1f} s, max {max(cost):.1f} s")
    setups = [t.user_attrs["setup_s"] for t in trials if "setup_s" in t.user_attrs]
    if setups:
        reused = sum(bool(t.user_attrs.get("model_reused")) for t in trials)
        lines.append(f"per-trial overhead (engine build; model load when not reused): median "
                     f"{statistics.median(setups):.2f} s, max {max(setups):.2f} s; weights reused in {reused} trials")
    return lines


def _notes(study: optuna.Study, c: Conclusion, traffic: TrafficLoad) -> list[str]:
    notes = [f"trial {t.number}: {t.user_attrs.get('status', t.state.name.lower())}: "
             f"{mask_text(str(t.user_attrs.get('reason')))}"
             for t in study.get_trials(deepcopy=False)
             if t.state is TrialState.FAIL or t.user_attrs.get("status") not in (None, "ok")]
    notes += [f"trial {t.number}: {inversion_note(t.user_attrs['metrics']).removeprefix('; ')}"
              for t in study.get_trials(deepcopy=False) if "inversion_pass_scale" in t.user_attrs.get("metrics", {})]
    notes += [f"re-measurement failed: {f}" for f in (*c.selection.failed, *c.proof.failed)]
    notes += [f"replay failed: {f}" for f in (c.no_capacity.failed if c.no_capacity else ())]
    done, needed = plots.importances_needed(study)
    if done < needed:
        notes.append(f"no parameter importances plot: {done} completed trials, an estimate needs {needed} "
                     f"({plots.MIN_IMPORTANCE_TRIALS}, and 2 per searched parameter)")
    if traffic.skipped_count or traffic.rejected_too_long or traffic.truncated:
        notes.append(f"traffic: {traffic.skipped_count} lines skipped, {traffic.rejected_too_long} requests "
                     f"rejected as too long, {traffic.truncated} truncated")
    return notes


def _arrivals(window: ReplayWindow | None) -> str:
    return grouped_arrivals(window) if window is not None else ""


def reproduce_command(overrides: Sequence[str], study_name: str) -> str:
    """The command that reruns this study: its overrides, with the study named (a rerun resumes it, and
    with its budget spent, measures the conclusion again)."""
    named = [o for o in overrides if not o.startswith(("tuner.study_name=", "hydra.run.dir="))]
    return mask_text(" ".join(["python -m tuner", *named, f"tuner.study_name={study_name}"]))


def report_inputs(run: StudyRun, study: optuna.Study, c: Conclusion, plot_names: Sequence[str],
                  overrides: Sequence[str], fidelity_lines: Sequence[str] = (),
                  vllm_unexpressed: Sequence[str] = ()) -> ReportInputs:
    traffic, rates, objective = run.inputs.traffic, run.inputs.rates, run.measuring.tuner.objective
    windows = (run.inputs.search, run.inputs.held_out)
    return ReportInputs(
        study_name=study.study_name, conclusion=c, objective=objective.value, slo=_slo(run.measuring.slo),
        traffic=f"{Path(traffic.path).name} ({traffic.format}, {len(traffic.requests)} requests, "
                f"sha256 {traffic.sha256[:12]})",
        windows=_windows(*windows), capacity_reading=capacity_reading(objective, c, rates, run.devices),
        inert=run.space.inert,
        search_lines=_search_lines(study),
        max_model_len_candidates=[(m.max_model_len, m.rejected_share)
                                  for m in max_model_len_candidates(traffic.logged_totals)],
        reproduce_command=reproduce_command(overrides, study.study_name),
        tracking_uri=mask_url(run.tracking.uri),
        notes=_notes(study, c, traffic), plots=plot_names,
        figures=run.executors.figures, fidelity_lines=fidelity_lines, simulated=run.simulated,
        arrivals=grouped_arrivals(windows[0]), window_shifts=window_shift_notes(c, _arrivals(windows[1])),
        vllm_unexpressed=vllm_unexpressed, deployment=deployment_line(c.exported.config, run.devices))


def study_plots(measuring: Measuring, study: optuna.Study, c: Conclusion, folder: Path,
                rate_rps: float | None = None) -> list[Path]:
    """The study's plots; `rate_rps` (the proof window's own rate, req/s) labels a goodput or pareto latency CDF."""
    folder.mkdir(parents=True, exist_ok=True)
    objective = measuring.tuner.objective
    label = plots.objective_label(objective.value)
    made = [plots.optimization_history(study, folder / "optimization_history.png", label)]
    importances = plots.param_importances(study, folder / "param_importances.png")
    made += [importances] if importances is not None else []
    if objective is ObjectiveName.pareto:
        made.append(plots.pareto_front(study, folder / "pareto_front.png", label))
    if c.no_capacity is not None:  # no capacity to plot: the latencies at the trace's own rate
        rows = {a.label: a.rows for a in c.no_capacity.ranking}
        best = c.no_capacity.best.label if c.no_capacity.best else BASELINE
        made.append(plots.latency_cdf(_latencies(rows.get(best, ())), _latencies(rows.get(BASELINE, ())),
                                      folder / "latency_cdf.png", _rate_label(c.no_capacity.rate_rps, "own rate"),
                                      best))
        return made
    if objective is ObjectiveName.capacity:
        labels = {"baseline": BASELINE} | ({"pick": c.pick.label} if c.pick.label != BASELINE else {})
        curves = {name: c.proof.probes[label] for name, label in labels.items()}
        made.append(plots.capacity_curve(curves, measuring.slo.attainment, folder / "capacity.png"))
        rate = "each at its capacity, the highest rate meeting the SLO" + _first_rates(c)
    else:
        rate = _rate_label(rate_rps, "recorded rate")
    made.append(plots.latency_cdf(_latencies(c.proof.rows.get(c.pick.label, ())),
                                  _latencies(c.proof.rows.get(BASELINE, ())), folder / "latency_cdf.png", rate))
    return made


def _first_rates(c: Conclusion) -> str:
    """The rates of the proof measurements whose latencies the CDF draws (each config's first one that completed)."""
    labels = {"pick": c.pick.label, "baseline": BASELINE} if c.pick.label != BASELINE else {"baseline": BASELINE}
    firsts = {name: next((v for v in c.proof.values.get(label, []) if v is not None), None)
              for name, label in labels.items()}
    rates = [f"{name} {value:.4g} req/s" for name, value in firsts.items() if value is not None]
    return f" ({', '.join(rates)})" if rates else ""


def _rate_label(rate_rps: float | None, what: str) -> str:
    return f"at the trace's {what}" + (f", {rate_rps:.4g} req/s" if rate_rps is not None else "")


def _latencies(rows: Sequence[dict[str, Any]]) -> dict[str, list[float]]:
    return {k: [r[f"{k}_s"] for r in rows if r[f"{k}_s"] is not None] for k in ("ttft", "tpot")}


def summary_lines(c: Conclusion, report: ReportInputs, paths: ExportPaths, tracking_uri: str,
                  review_link: str = "") -> list[str]:
    """The console's closing summary: the report's headline, then where everything is; `review_link` the study's
    run in MLflow's model-training view."""
    headline = [line.removeprefix("- ").replace("**", "") for line in headline_lines(report) if line]
    lines = ["", *headline, f"best.yaml:  {paths.best}", f"vllm.yaml:  {paths.vllm}", f"report.md:  {paths.report}",
             f"review:     mlflow ui --backend-store-uri {mask_url(tracking_uri)}"]
    return lines + ([f"            then open {review_link}"] if review_link else [])


def export_metadata(run: StudyRun, study: optuna.Study, c: Conclusion) -> dict[str, Any]:
    """best.yaml's provenance: the verdict and its interval, and the runner-up beside it; `figures` says whether
    they were measured or simulated (and from which GPU profile)."""
    simulated = run.simulated
    interval = c.verdict.interval
    meta = {"study": study.study_name, "trial": c.exported.trial, "config": c.exported.label,
            "verdict": verdict_text(c, simulated), "method": c.verdict.method,
            "value": c.proof.median(c.exported.label) if c.no_capacity is None else 0.0, "unit": c.unit,
            "objective": run.measuring.tuner.objective.value, "traffic_sha256": run.inputs.traffic.sha256,
            "model": run.runtime.model.name, "hardware": run.hardware.summary, "figures": run.executors.figures,
            "baseline": run.baseline_name.value, **provenance()}
    if (deployment := deployment_meta(c.exported.config, run.devices)) is not None:
        meta["deployment"] = deployment  # vllm.yaml's replica comment reads it
    if interval is not None:
        meta["interval"] = {"mean": interval.mean, "low": interval.low, "high": interval.high,
                            "rounds": interval.rounds}
    if c.no_capacity is not None:
        meta["at_trace_rate"] = _at_trace_rate_meta(c)
    if c.runner_up is not None:
        meta["runner_up"] = {"trial": c.runner_up.trial, "runtime": c.runner_up.config.to_dict()}
    return meta


def study_metrics(c: Conclusion) -> dict[str, float]:
    """The parent run's headline figures: the exported and the baseline value, the interval, or (every config at 0)
    the best SLO load at the trace's own rate and the proposed SLO."""
    metrics = {"improved": float(c.verdict.improved)}
    for name, label in (("exported_value", c.exported.label), ("baseline_value", BASELINE)):
        if (value := c.proof.median(label)) is not None:
            metrics[name] = value
    if c.verdict.interval is not None:
        i = c.verdict.interval
        metrics |= {"pick_minus_baseline": i.mean, "pick_minus_baseline_low": i.low,
                    "pick_minus_baseline_high": i.high}
    if c.no_capacity is not None and c.no_capacity.best is not None:
        best = c.no_capacity.best
        metrics |= {"best_slo_load_at_trace_rate": best.load, "best_ttft_p99_s_at_trace_rate": best.ttft_p99_s,
                    "best_tpot_p99_s_at_trace_rate": best.tpot_p99_s}
        if c.no_capacity.proposed is not None:
            metrics |= {"proposed_slo_ttft_s": c.no_capacity.proposed.ttft_s,
                        "proposed_slo_tpot_s": c.no_capacity.proposed.tpot_s}
    return metrics


def study_history(study: optuna.Study) -> dict[str, list[tuple[int, float]]]:
    """Per trial, step = its number: the search's value (a pruned trial's where it stopped) and the TTFT and TPOT
    p99 it recorded; MLflow charts them on the parent run (the optimization history, without opening a file)."""
    history: dict[str, list[tuple[int, float]]] = {"trial_value": [], "trial_value_pruned": [],
                                                   "trial_ttft_p99_s": [], "trial_tpot_p99_s": []}
    for t in study.get_trials(deepcopy=False):
        if t.state is TrialState.COMPLETE and t.values:
            history["trial_value"].append((t.number, t.values[0]))
        elif t.state is TrialState.PRUNED and t.last_step is not None:
            history["trial_value_pruned"].append((t.number, t.intermediate_values[t.last_step]))
        metrics = t.user_attrs.get("metrics", {})
        for name in ("ttft_p99_s", "tpot_p99_s"):
            if name in metrics:
                history[f"trial_{name}"].append((t.number, metrics[name]))
    return {k: v for k, v in history.items() if v}


def _at_trace_rate_meta(c: Conclusion) -> dict[str, Any]:
    nc = c.no_capacity
    meta: dict[str, Any] = {"rate_rps": nc.rate_rps, "ranking": [
        {"config": a.label, "ttft_p99_s": a.ttft_p99_s, "tpot_p99_s": a.tpot_p99_s, "meets_slo": a.meets,
         "slo_load": a.load} for a in nc.ranking]}
    if nc.proposed is not None:
        meta["proposed_slo"] = {"ttft_s": nc.proposed.ttft_s, "tpot_s": nc.proposed.tpot_s}
    return meta
