"""What a finished study leaves behind: the report's inputs, the study plots, the closing summary."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import optuna
from optuna.trial import TrialState

from tuner import plots
from tuner.config import AppConfig
from tuner.export import ExportPaths
from tuner.redact import mask_text, mask_url
from tuner.report import ReportInputs, render_report
from tuner.space import BASELINE_ATTR
from tuner.traffic import TrafficLoad, max_model_len_candidates
from tuner.validate import BASELINE, BEST, Picked, Validation


def _knobs(trial: optuna.trial.FrozenTrial) -> dict:
    return {**trial.user_attrs.get(BASELINE_ATTR, {}), **trial.params}


def _notes(study: optuna.Study, validation: Validation, traffic: TrafficLoad) -> list[str]:
    trials = study.get_trials(deepcopy=False)
    notes = []
    for t in trials:
        if t.state is TrialState.FAIL or t.user_attrs.get("status") not in (None, "ok"):
            notes.append(f"trial {t.number}: {t.user_attrs.get('status', t.state.name.lower())}: "
                         f"{mask_text(str(t.user_attrs.get('reason')))}")
    setups = [t.user_attrs["setup_s"] for t in trials if "setup_s" in t.user_attrs]
    if setups:
        reused = sum(bool(t.user_attrs.get("model_reused")) for t in trials)
        notes.append(f"per-trial overhead (engine build; model load when not reused): mean "
                     f"{statistics.mean(setups):.2f} s, max {max(setups):.2f} s; weights reused in {reused} trials")
    notes += [f"validation replay failed: {f}" for f in validation.failed]
    if traffic.skipped_count or traffic.rejected_too_long or traffic.truncated:
        notes.append(f"traffic: {traffic.skipped_count} lines skipped, {traffic.rejected_too_long} requests "
                     f"rejected as too long, {traffic.truncated} truncated")
    return notes


def write_report(app: AppConfig, study: optuna.Study, picked: Picked, validation: Validation,
                 traffic: TrafficLoad) -> str:
    baseline = picked.baseline or picked.best
    windows = validation.windows
    if picked.baseline is None:  # the baseline failed: show the winner on both sides, and say so
        windows = {w: {BEST: c[BEST], BASELINE: c[BEST]} for w, c in windows.items()}
    candidates = [(c.max_model_len, c.rejected_share) for c in max_model_len_candidates(traffic.requests)]
    notes = _notes(study, validation, traffic)
    if picked.baseline is None:
        notes.insert(0, "the baseline trial did not complete: the baseline columns repeat the winner")
    return render_report(ReportInputs(
        study_name=app.tuner.study_name, best_trial=picked.best.number, baseline_trial=baseline.number,
        best_params=_knobs(picked.best), baseline_params=_knobs(baseline), windows=windows,
        max_model_len_candidates=candidates,
        reproduce_command=mask_text("python -m tuner " + " ".join(sys.argv[1:])),
        tracking_uri=mask_url(app.tracking.uri), notes=notes))


def study_plots(app: AppConfig, study: optuna.Study, validation: Validation, folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    made = [plots.optimization_history(study, folder / "optimization_history.png"),
            plots.param_importances(study, folder / "param_importances.png")]
    if app.tuner.objective.value == "pareto":
        made.append(plots.pareto_front(study, folder / "pareto_front.png"))
    made.append(plots.latency_cdf(validation.latencies.get(BEST, {}), validation.latencies.get(BASELINE, {}),
                                  folder / "latency_cdf.png"))
    return made


def summary_lines(app: AppConfig, picked: Picked, paths: ExportPaths) -> list[str]:
    best = picked.best.user_attrs["metrics"]
    lines = [f"\nstudy {app.tuner.study_name}: best trial {picked.best.number}"]
    if picked.baseline is not None:
        base = picked.baseline.user_attrs["metrics"]
        for key, label in (("goodput_rps", "goodput req/s"), ("ttft_p99_s", "TTFT p99 s"),
                           ("tpot_p99_s", "TPOT p99 s"), ("output_tok_s", "output tok/s")):
            lines.append(f"  {label:<14} best {best.get(key, float('nan')):10.4f}   "
                         f"baseline (trial {picked.baseline.number}) {base.get(key, float('nan')):10.4f}")
    lines += [f"best.yaml:  {paths.best}", f"vllm.yaml:  {paths.vllm}", f"report.md:  {paths.report}",
              f"review:     mlflow ui --backend-store-uri {mask_url(app.tracking.uri)}"]
    return lines
