"""Study plots as PNG files that MLflow shows on the parent run.

Built on matplotlib's object API (``Figure``, never ``pyplot``): no GUI, no global figure state, safe
in worker processes and on headless machines. Each function writes one PNG and returns its path. A
plot that cannot be drawn (too few trials, a single-objective study asked for a Pareto front, no
latencies) is still written, showing why, so a report never has a missing file or a traceback; the
one exception is the importances, which are not written at all below MIN_IMPORTANCE_TRIALS (an empty
image reads as a broken one: the report says why there is none).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import optuna
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

__all__ = [
    "MIN_IMPORTANCE_TRIALS",
    "capacity_curve",
    "importances_needed",
    "latency_cdf",
    "objective_label",
    "optimization_history",
    "param_importances",
    "pareto_front",
    "pruned_points",
]

# Below max(this, 2 per searched parameter) completed trials an importance estimate is noise; say so instead.
MIN_IMPORTANCE_TRIALS = 10
_LABELS = {"capacity": ["capacity (req/s)"], "goodput": ["goodput (req/s)"],
           "pareto": ["output throughput (tok/s)", "E2E latency p99 (s)"]}
_DPI = 100
_BEST, _BASELINE = "tab:blue", "tab:gray"


def objective_label(objective: str) -> list[str]:
    """Axis labels, with units, of a study's objective(s)."""
    return list(_LABELS[objective])


def _save(fig: Figure, path: Path | str) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=_DPI, format="png")
    return out


def _notice(title: str, message: str, path: Path | str) -> Path:
    """A plot that explains why there is nothing to plot."""
    fig = Figure(figsize=(6.4, 3.2))
    ax = fig.add_subplot()
    ax.set_title(title)
    ax.text(0.5, 0.5, message, ha="center", va="center", wrap=True, transform=ax.transAxes)
    ax.set_axis_off()
    return _save(fig, path)


def _completed(study: optuna.Study) -> list[FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))


def _feasible(trial: FrozenTrial) -> bool:
    return all(value <= 0.0 for value in trial.constraints.values())


def _objective_names(study: optuna.Study, labels: Sequence[str] | None) -> list[str]:
    if labels is not None:
        return list(labels)
    names = study.metric_names
    return list(names) if names else [f"objective {i}" for i in range(len(study.directions))]


def _best_so_far(values: Sequence[float], direction: StudyDirection) -> list[float]:
    pick = max if direction == StudyDirection.MAXIMIZE else min
    best: list[float] = []
    for value in values:
        best.append(value if not best else pick(best[-1], value))
    return best


def optimization_history(study: optuna.Study, path: Path | str,
                         objective_labels: Sequence[str] | None = None) -> Path:
    """Objective value of every completed trial by trial number, with the best feasible so far; pruned trials
    at the value they were stopped at (their last report), so a reviewer sees every trial that ran.

    One panel per objective. ``objective_labels`` (with units, e.g. "goodput (req/s)") default to
    the study's metric names.
    """
    trials = _completed(study)
    pruned = pruned_points(study)
    if not trials and not pruned:
        return _notice("Optimization history", "No completed trials yet.", path)
    names = _objective_names(study, objective_labels)
    fig = Figure(figsize=(7.0, 3.2 * len(names)), layout="constrained")
    for i, (name, direction) in enumerate(zip(names, study.directions)):
        ax = fig.add_subplot(len(names), 1, i + 1)
        _history_panel(ax, trials, i, direction)
        if i == 0 and pruned:
            ax.scatter([n for n, _ in pruned], [v for _, v in pruned], s=22, marker="v", facecolors="none",
                       edgecolors="tab:purple", label="pruned trial (stopped at)")
            ax.legend(loc="best", fontsize="small")
        ax.set_ylabel(name)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # trials are numbered 0, 1, 2, ...
    fig.axes[-1].set_xlabel("trial number")
    fig.suptitle(f"Optimization history: {study.study_name}")
    return _save(fig, path)


def pruned_points(study: optuna.Study) -> list[tuple[int, float]]:
    """(trial number, the value it was stopped at: its last report) of every pruned trial that reported."""
    return [(t.number, t.intermediate_values[t.last_step])
            for t in study.get_trials(deepcopy=False, states=(TrialState.PRUNED,)) if t.last_step is not None]


def _history_panel(ax: Axes, trials: Sequence[FrozenTrial], index: int, direction: StudyDirection) -> None:
    feasible = [t for t in trials if _feasible(t)]
    infeasible = [t for t in trials if not _feasible(t)]
    ax.scatter([t.number for t in feasible], [t.values[index] for t in feasible], s=18, color=_BEST,
               label="feasible trial")
    if infeasible:
        ax.scatter([t.number for t in infeasible], [t.values[index] for t in infeasible], s=18,
                   marker="x", color="tab:red", label="infeasible trial")
    if feasible:
        best = _best_so_far([t.values[index] for t in feasible], direction)
        ax.step([t.number for t in feasible], best, where="post", color="tab:orange",
                label=f"best so far ({direction.name.lower()})")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")


def pareto_front(study: optuna.Study, path: Path | str,
                 objective_labels: Sequence[str] | None = None) -> Path:
    """The first two objectives of every completed trial, the Pareto-optimal feasible ones marked."""
    title = "Pareto front"
    if len(study.directions) < 2:
        return _notice(title, "Single-objective study: there is no Pareto front.", path)
    trials = _completed(study)
    if not trials:
        return _notice(title, "No completed trials yet.", path)
    names = _objective_names(study, objective_labels)
    front = sorted(study.best_trials, key=lambda t: t.values[0])
    front_numbers = {t.number for t in front}
    others = [t for t in trials if t.number not in front_numbers]
    fig = Figure(figsize=(6.4, 4.8), layout="constrained")
    ax = fig.add_subplot()
    ax.scatter([t.values[0] for t in others], [t.values[1] for t in others], s=18, color=_BASELINE,
               alpha=0.6, label="dominated or infeasible trial")
    ax.plot([t.values[0] for t in front], [t.values[1] for t in front], "o-", color=_BEST,
            label=f"Pareto-optimal ({len(front)})")
    for t in front:
        ax.annotate(f"#{t.number}", (t.values[0], t.values[1]), textcoords="offset points", xytext=(4, 4),
                    fontsize="x-small")
    arrows = ["↑" if d == StudyDirection.MAXIMIZE else "↓" for d in study.directions[:2]]
    ax.set_xlabel(f"{names[0]} {arrows[0]} better")
    ax.set_ylabel(f"{names[1]} {arrows[1]} better")
    ax.set_title(f"{title}: {study.study_name}" + (" (first two objectives)" if len(names) > 2 else ""))
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    return _save(fig, path)


def importances_needed(study: optuna.Study) -> tuple[int, int]:
    """(completed trials, completed trials an importance estimate needs: 10, and 2 per searched parameter)."""
    done = _completed(study)
    n_params = len({name for t in done for name in t.params})
    return len(done), max(MIN_IMPORTANCE_TRIALS, 2 * n_params)


def param_importances(study: optuna.Study, path: Path | str) -> Path | None:
    """Optuna's parameter importances (PED-ANOVA; toward the Pareto front when multi-objective); None (no file)
    below `importances_needed`: an estimate from fewer trials is noise."""
    title = "Parameter importances"
    n_done, needed = importances_needed(study)
    if n_done < needed:
        return None
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            importances = optuna.importance.get_param_importances(study)
    except (ValueError, RuntimeError, ZeroDivisionError) as err:
        return _notice(title, f"Parameter importances are not available: {err}", path)
    # Optuna falls back to equal importances (with a warning) when it cannot tell params apart;
    # equal bars would read as a finding, so show its reason instead.
    equal = [str(w.message) for w in caught if "will be equal" in str(w.message)]
    if equal or not importances:
        reason = equal[0] if equal else "No parameter was searched."
        return _notice(title, f"Parameter importances are not available ({n_done} trials): {reason}", path)
    names = list(importances)[::-1]  # most important on top
    fig = Figure(figsize=(7.0, 1.2 + 0.35 * len(names)), layout="constrained")
    ax = fig.add_subplot()
    bars = ax.barh(names, [importances[n] for n in names], color=_BEST, label="importance")
    ax.bar_label(bars, fmt="%.2f", fontsize="small", padding=2)
    ax.set_xlabel("relative importance (fraction of 1)")
    ax.set_ylabel("parameter")
    ax.set_xlim(0, 1.1)
    ax.set_title(f"{title}: {study.study_name} ({n_done} completed trials)")
    ax.legend(loc="lower right", fontsize="small")
    return _save(fig, path)


def _clean(values: Sequence[float | None]) -> np.ndarray:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return np.sort(np.asarray(finite, dtype=float))  # [n]


def _cdf_curve(ax: Axes, seconds: Sequence[float | None], label: str, color: str, style: str) -> bool:
    values_ms = _clean(seconds) * 1000.0  # [n], sorted
    if values_ms.size == 0:
        return False
    fraction = np.arange(1, values_ms.size + 1) / values_ms.size  # [n]
    p99 = float(np.percentile(values_ms, 99))
    ax.step(values_ms, fraction, where="post", color=color, linestyle=style,
            label=f"{label}: p99 {p99:.1f} ms, n={values_ms.size}")
    return True


def latency_cdf(best_latencies: Mapping[str, Sequence[float]],
                baseline_latencies: Mapping[str, Sequence[float]], path: Path | str, rate: str = "",
                best_label: str = "best") -> Path:
    """Empirical CDFs of per-request latencies (seconds in, plotted in ms), best vs. baseline.

    One panel per metric name found in either mapping (e.g. ``ttft``, ``tpot``), in that order. `rate` says at
    which arrival rate they were measured ("at the trace's own rate, 4.1 req/s"), in the title.
    """
    metrics = list(dict.fromkeys([*best_latencies, *baseline_latencies]))
    if not metrics:
        return _notice("Latency CDF", "No latencies recorded.", path)
    fig = Figure(figsize=(6.0 * len(metrics), 4.2), layout="constrained")
    for i, metric in enumerate(metrics):
        ax = fig.add_subplot(1, len(metrics), i + 1)
        drawn = _cdf_curve(ax, best_latencies.get(metric, ()), best_label, _BEST, "-")
        drawn |= _cdf_curve(ax, baseline_latencies.get(metric, ()), "baseline", _BASELINE, "--")
        ax.set_title(f"{metric.upper()} CDF")
        ax.set_xlabel(f"{metric.upper()} (ms)")
        ax.set_ylabel("fraction of requests")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        if drawn:
            ax.legend(loc="lower right", fontsize="small")
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    fig.suptitle(f"Per-request latency: {best_label} vs. baseline" + (f", {rate}" if rate else ""))
    return _save(fig, path)


def capacity_curve(curves: Mapping[str, Sequence[Sequence]], target: float, path: Path | str) -> Path:
    """SLO attainment against arrival rate, one line per measurement round, for each config.

    `curves`: config name -> per round, its probes (`tuner.measure.job.Probe`, scale in req/s). Each
    probe is drawn at its median attainment with a bar from the lowest to the highest replay.
    """
    drawable = {name: [[p for p in probes if 0 < p.scale < math.inf] for probes in rounds]
                for name, rounds in curves.items()}
    if not any(probes for rounds in drawable.values() for probes in rounds):
        return _notice("Capacity", "No capacity measurements to draw.", path)
    curves = drawable
    fig = Figure(figsize=(7.0, 4.2), layout="constrained")
    ax = fig.add_subplot()
    for (name, rounds), color in zip(curves.items(), (_BASELINE, _BEST, "tab:green")):
        for i, probes in enumerate(rounds):
            pts = sorted((p.scale, [r.metrics["slo_attainment"] for r in p.replays]) for p in probes)
            if not pts:
                continue
            xs = [x for x, _ in pts]
            mid = [float(np.median(v)) for _, v in pts]
            err = [[m - min(v) for (_, v), m in zip(pts, mid)], [max(v) - m for (_, v), m in zip(pts, mid)]]
            ax.errorbar(xs, mid, yerr=err, fmt="o-", color=color, alpha=0.8, markersize=4, linewidth=1,
                        label=name if i == 0 else None)
    ax.axhline(target, color="tab:red", linestyle=":", label=f"SLO attainment target {target:.0%}")
    ax.set_xscale("log")
    ax.set_xlabel("arrival rate (req/s, log scale)")
    ax.set_ylabel("SLO attainment (share of requests)")
    ax.set_ylim(-0.02, 1.05)
    ax.set_title("Capacity: SLO attainment vs. arrival rate (proof window, one line per round)")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left", fontsize="small")
    return _save(fig, path)
