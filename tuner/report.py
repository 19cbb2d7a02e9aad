"""`report.md`: the best configuration against the baseline, side by side, on every replay window.

Each window (the searched part of the trace, and the held-out part replayed after the search) holds
one metrics dict per repeat for each config; the report quotes the mean and, when repeated, the
min..max spread, so a lucky or overfitted winner shows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BASELINE", "BEST", "METRICS", "ReportInputs", "render_report"]

BEST = "best"  # config label of the winner in `ReportInputs.windows`
BASELINE = "baseline"  # config label of the baseline
# Metric name -> True when higher is better; also the order of the metrics tables.
METRICS: dict[str, bool] = {
    "goodput_rps": True, "throughput_rps": True, "output_tok_s": True, "slo_attainment": True,
    "ttft_p50_s": False, "ttft_p90_s": False, "ttft_p99_s": False,
    "tpot_p50_s": False, "tpot_p90_s": False, "tpot_p99_s": False, "itl_p99_s": False,
    "e2e_p50_s": False, "e2e_p99_s": False,
    "kv_util_mean": True, "kv_waste_mean": False, "prefix_hit_rate": True,
    "preemptions": False, "rejections": False, "peak_memory_gb": False,
}


@dataclass(frozen=True)
class ReportInputs:
    study_name: str
    best_trial: int  # Optuna trial number of the winner
    baseline_trial: int  # Optuna trial number of the baseline (the runtime config as composed)
    best_params: Mapping[str, Any]  # knob -> value of the winner (inactive knobs absent)
    baseline_params: Mapping[str, Any]  # knob -> value of the baseline
    # window name ("search", "validation") -> config label (BEST, BASELINE) -> one metrics dict per repeat
    windows: Mapping[str, Mapping[str, Sequence[Mapping[str, float]]]]
    max_model_len_candidates: Sequence[tuple[int, float]] = ()  # (max_model_len, share of requests rejected)
    reproduce_command: str = ""  # the command that reruns (or resumes) the study
    tracking_uri: str = "sqlite:///mlflow.db"  # where MLflow keeps the study's runs
    notes: Sequence[str] = field(default_factory=tuple)  # extra lines, e.g. pruned or failed trials

    def __post_init__(self) -> None:
        for window, configs in self.windows.items():
            for label in (BASELINE, BEST):
                if not configs.get(label):
                    raise ValueError(f"windows[{window!r}][{label!r}]: needs at least one repeat")


def render_report(inputs: ReportInputs) -> str:
    """The markdown report; deterministic for given inputs."""
    parts = [_summary(inputs), _params_table(inputs)]
    parts += [_window_table(name, configs) for name, configs in inputs.windows.items()]
    if inputs.max_model_len_candidates:
        parts.append(_max_model_len_table(inputs.max_model_len_candidates))
    parts.append(_commands(inputs))
    if inputs.notes:
        parts.append("## Notes\n\n" + "\n".join(f"- {note}" for note in inputs.notes))
    return "\n\n".join(parts) + "\n"


def _summary(inputs: ReportInputs) -> str:
    lines = [f"# pagetune report: study `{inputs.study_name}`", "",
             f"Best: trial {inputs.best_trial}. Baseline: trial {inputs.baseline_trial} "
             "(the runtime config as composed, run first)."]
    if inputs.best_trial == inputs.baseline_trial:
        lines.append("The baseline itself is the best configuration found.")
    goodput = []
    for window, configs in inputs.windows.items():
        base, best = _mean(configs[BASELINE], "goodput_rps"), _mean(configs[BEST], "goodput_rps")
        if base is not None and best is not None:
            goodput.append(f"- Goodput, {window} window: {_num(base)} -> {_num(best)} req/s "
                           f"({_change(base, best)})")
    return "\n".join(lines + (["", *goodput] if goodput else []))


def _params_table(inputs: ReportInputs) -> str:
    names = [*inputs.best_params, *(k for k in inputs.baseline_params if k not in inputs.best_params)]
    rows = ["## Configuration", "", "Knobs that differ are in bold.", "",
            "| knob | baseline | best |", "|---|---|---|"]
    for name in names:
        base, best = _param(inputs.baseline_params, name), _param(inputs.best_params, name)
        rows.append(f"| {name} | {base} | {best if base == best else f'**{best}**'} |")
    return "\n".join(rows)


def _window_table(window: str, configs: Mapping[str, Sequence[Mapping[str, float]]]) -> str:
    base_runs, best_runs = configs[BASELINE], configs[BEST]
    present = {m for run in (*base_runs, *best_runs) for m in run}
    names = [m for m in METRICS if m in present] + sorted(present - set(METRICS))
    rows = [f"## Metrics: {window} window", "",
            f"Mean over repeats (baseline {len(base_runs)}, best {len(best_runs)}); "
            "min..max when repeated.", "",
            "| metric | baseline | best | change |", "|---|---|---|---|"]
    for name in names:
        base, best = _mean(base_runs, name), _mean(best_runs, name)
        change = _change(base, best, METRICS.get(name)) if base is not None and best is not None else "-"
        rows.append(f"| {name} | {_spread(base_runs, name)} | {_spread(best_runs, name)} | {change} |")
    return "\n".join(rows)


def _max_model_len_table(candidates: Sequence[tuple[int, float]]) -> str:
    rows = ["## max_model_len candidates", "",
            "From the traffic's prompt + output lengths: longer requests are rejected.", "",
            "| max_model_len | requests rejected |", "|---|---|"]
    rows += [f"| {length} | {share:.2%} |" for length, share in candidates]
    return "\n".join(rows)


def _commands(inputs: ReportInputs) -> str:
    lines = ["## Reproduce and review", "", "```"]
    if inputs.reproduce_command:
        lines.append(inputs.reproduce_command)
    lines += [f"mlflow ui --backend-store-uri {inputs.tracking_uri}", "```"]
    return "\n".join(lines)


# --- formatting -----------------------------------------------------------------------------------

def _values(runs: Sequence[Mapping[str, float]], name: str) -> list[float]:
    return [float(run[name]) for run in runs if name in run]


def _mean(runs: Sequence[Mapping[str, float]], name: str) -> float | None:
    values = _values(runs, name)
    return sum(values) / len(values) if values else None


def _spread(runs: Sequence[Mapping[str, float]], name: str) -> str:
    values = _values(runs, name)
    if not values:
        return "-"
    mean = _num(sum(values) / len(values))
    return mean if len(values) == 1 else f"{mean} ({_num(min(values))}..{_num(max(values))})"


def _change(base: float, best: float, higher_is_better: bool | None = True) -> str:
    if base == 0:
        return "-"
    pct = f"{(best - base) / abs(base):+.1%}"
    if best == base or higher_is_better is None:
        return pct
    return f"{pct} {'better' if (best > base) == higher_is_better else 'worse'}"


def _num(value: float) -> str:
    return f"{value:.4g}"


def _param(params: Mapping[str, Any], name: str) -> str:
    if name not in params:
        return "-"  # inactive in this config (a conditional knob)
    value = params[name]
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    return _num(value) if isinstance(value, float) else str(value)
