"""`report.md`: what a serving engineer reads in a minute. The verdict and the interval first, then
the knobs that differ, the measurements behind the verdict (medians, spreads, per round), what the
search cost, and how to reproduce it. Deterministic for given inputs; floats rounded to what was
measured (4 significant digits, percentages to 0.1).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tuner.results.conclude import Conclusion
from tuner.results.finalists import Remeasured

__all__ = ["ReportInputs", "headline_lines", "render_report", "study_note", "verdict_text"]

SIM_PROOF = ("simulated, so its interval is the bisection's resolution, not noise; measure it on the GPU with "
             "tuner.fidelity=sim+real")


@dataclass(frozen=True)
class ReportInputs:
    study_name: str
    conclusion: Conclusion
    objective: str  # capacity | goodput | pareto
    slo: str  # "TTFT <= 2 s, TPOT <= 0.1 s, attainment 99%"
    traffic: str  # "sample.jsonl (native, 120 requests, sha256 3f2a...)"
    windows: str  # "search 96 requests at 4.02 req/s; held out 24 requests at 3.8 req/s"
    capacity_reading: Sequence[str] = ()  # lines: x trace rate, replicas at the trace's peak
    inert: Sequence[str] = ()  # knobs not searched: no effect on this device
    search_lines: Sequence[str] = ()  # trials run, pruned, failed; cost per trial
    max_model_len_candidates: Sequence[tuple[int, float]] = ()  # (max_model_len, share of requests rejected)
    reproduce_command: str = ""
    tracking_uri: str = "sqlite:///mlflow.db"
    notes: Sequence[str] = field(default_factory=tuple)
    plots: Sequence[str] = ()  # file names under plots/
    figures: str = "measured on the real runtime"  # or simulated, and from which GPU profile
    fidelity_lines: Sequence[str] = ()  # sim+real: simulated vs measured per candidate, the profile's refit
    simulated: bool = False  # the verdict's figures are simulated (executor=sim without sim+real)
    arrivals: str = ""  # requests arriving in groups at one instant, when they are many (traffic.ArrivalGroups)
    window_shifts: Sequence[str] = ()  # configs whose value moved several-fold between the windows (results.shift)
    vllm_unexpressed: Sequence[str] = ()  # measured knobs vllm.yaml cannot hold, with what it holds instead
    deployment: str = ""  # the exported shape over several devices (TP degree x replicas); "" for one device


def verdict_text(c: Conclusion, simulated: bool) -> str:
    """The verdict line, the same in the console, report.md, best.yaml and MLflow: a simulated one says so."""
    if not simulated:
        return c.verdict.headline
    proof = SIM_PROOF if c.verdict.interval is not None else SIM_PROOF.split("; ", 1)[1]
    return f"simulated: {c.verdict.headline} ({proof})"


def render_report(inputs: ReportInputs) -> str:
    c = inputs.conclusion
    parts = [_headline(inputs), _knobs(c, inputs.inert)]
    parts += [_at_trace_rate(inputs)] if c.no_capacity is not None else [_selection(c), _proof(c)]
    if inputs.fidelity_lines:
        parts.append("## Simulated and measured\n\n" + "\n".join(f"- {line}" for line in inputs.fidelity_lines))
    if inputs.search_lines:
        parts.append("## The search\n\n" + "\n".join(f"- {line}" for line in inputs.search_lines))
    if inputs.max_model_len_candidates:
        parts.append(_max_model_len_table(inputs.max_model_len_candidates))
    parts.append(_commands(inputs))
    if inputs.notes:
        parts.append("## Notes\n\n" + "\n".join(f"- {note}" for note in inputs.notes))
    return "\n\n".join(parts) + "\n"


def study_note(inputs: ReportInputs) -> str:
    """The parent run's description in MLflow (markdown): the verdict and the figures behind it."""
    return "\n".join([*headline_lines(inputs), "", "The whole report: the run's `report.md` artifact; plots under "
                      "its artifacts."])


def _headline(inputs: ReportInputs) -> str:
    return "\n".join([f"# pagetune report: study `{inputs.study_name}`", "", *headline_lines(inputs)])


def headline_lines(inputs: ReportInputs) -> list[str]:
    """The verdict and the figures behind it: the report's first lines and the console's closing summary."""
    c = inputs.conclusion
    exported = c.exported
    lines = [f"**Verdict: {verdict_text(c, inputs.simulated)}.**", "",
             f"- Exported (best.yaml): **{exported.label}**"
             + (f"; runner-up not exported: {c.runner_up.label}" if c.runner_up else "")]
    if c.no_capacity is None:
        value, rounds = c.proof.median(exported.label), _done(c.proof, exported.label)
        lines += [f"- {inputs.objective.capitalize()} of the exported config on the proof window: "
                  f"{_num(value)} {c.unit} (median of {rounds} rounds)",
                  *[f"- {line}" for line in inputs.capacity_reading],
                  f"- Method: {c.verdict.method}; the pick was chosen on other replays (the search window)."]
    else:
        lines += [f"- Method: {c.verdict.method}.", *_no_capacity_lines(c)]
    if inputs.deployment:
        lines.append(f"- Deployment: {inputs.deployment}")
    lines += [f"- Figures: {inputs.figures}", f"- SLO: {inputs.slo}", f"- Traffic: {inputs.traffic}",
              f"- Windows: {inputs.windows}"]
    if inputs.arrivals:
        lines.append(f"- Arrivals: {inputs.arrivals}")
    lines += [f"- **Windows differ**: {shift}" for shift in inputs.window_shifts]
    lines.append("- vllm.yaml was not measured on vLLM: it is the exported config as far as vLLM can express it"
                 + ("; not expressible (its header says what it holds instead): " + "; ".join(inputs.vllm_unexpressed)
                    if inputs.vllm_unexpressed else ""))
    if c.no_capacity is None and c.proof.median(exported.label) == 0:
        lines.append("- **The SLO is not met at any rate tried** (down to the lowest rate scale the search tries).")
    return lines


def _no_capacity_lines(c: Conclusion) -> list[str]:
    """Every config measured 0: its p99s at the trace's own rate, the ranking, the SLO a capacity search can use."""
    nc = c.no_capacity
    lines = [f"- **No rate tried meets the SLO for any config.** At the trace's own rate ({nc.rate_rps:.4g} req/s), "
             "ranked by SLO load (the ratio to the SLO of the request at the attainment target; <= 1 meets it):"]
    lines += [f"  {rank}. {a.label}: TTFT p99 {_num(a.ttft_p99_s)} s, TPOT p99 {_num(a.tpot_p99_s)} s, "
              f"{a.meets:.1%} of requests meet the SLO, SLO load {_num(a.load)}"
              for rank, a in enumerate(nc.ranking, 1)]
    if nc.proposed is not None:
        lines.append(f"- Proposed SLO for a capacity search: slo.ttft_s={nc.proposed.ttft_s:g} "
                     f"slo.tpot_s={nc.proposed.tpot_s:g} ({nc.best.label} meets it at the trace's own rate)")
    return lines


def _at_trace_rate(inputs: ReportInputs) -> str:
    nc = inputs.conclusion.no_capacity
    rows = ["## At the trace's own rate: no config has a capacity", "",
            f"Every config measured capacity 0 (no rate tried meets the SLO), so selection and proof were skipped. "
            f"Each config replayed the search window once at its own rate ({nc.rate_rps:.4g} req/s), to its end.", "",
            "| rank | config | TTFT p99 (s) | TPOT p99 (s) | meet the SLO | SLO load |", "|---|---|---|---|---|---|"]
    rows += [f"| {rank} | {a.label} | {_num(a.ttft_p99_s)} | {_num(a.tpot_p99_s)} | {a.meets:.1%} | {_num(a.load)} |"
             for rank, a in enumerate(nc.ranking, 1)]
    return "\n".join(rows)


def _knobs(c: Conclusion, inert: Sequence[str]) -> str:
    base, pick = c.baseline.params, c.pick.params
    names = [n for n in dict.fromkeys([*pick, *base]) if _param(base, n) != _param(pick, n)]
    rows = ["## Knobs that differ", "", f"Baseline vs the pick ({c.pick.label}).", ""]
    if not names:
        rows.append("None: the pick is the baseline's configuration.")
    else:
        rows += ["| knob | baseline | pick |", "|---|---|---|"]
        rows += [f"| {n} | {_param(base, n)} | {_param(pick, n)} |" for n in names]
    if inert:
        rows += ["", f"Not searched, no effect on this device: {', '.join(inert)}."]
    return "\n".join(rows)


def _selection(c: Conclusion) -> str:
    rows = ["## Selection: fresh replays of the search window", "",
            f"Each config measured once per interleaved round; median (min..max), {c.unit}. "
            "The search's own value is the start of each measurement, never its result.", "",
            "| config | search value | median | min..max | rounds |", "|---|---|---|---|---|"]
    for cand in [c.baseline, *c.finalists]:
        rows.append(f"| {cand.label}{' (pick)' if cand.label == c.pick.label else ''} | {_num(cand.search_value)} | "
                    f"{_num(c.selection.median(cand.label))} | {_spread(c.selection, cand.label)} | "
                    f"{_done(c.selection, cand.label)} |")
    return "\n".join(rows)


def _proof(c: Conclusion) -> str:
    labels = list(c.proof.values)
    rows = [f"## Proof: the {c.proof.window} window", "",
            f"Interleaved rounds, pick and baseline back to back; {c.unit}.", "",
            "| round | " + " | ".join(labels) + (" | difference |" if len(labels) == 2 else " |"),
            "|---|" + "---|" * (len(labels) + (len(labels) == 2))]
    for r in range(len(c.proof.values[labels[0]])):
        values = [c.proof.values[label][r] for label in labels]
        cells = [_num(v) for v in values]
        if len(labels) == 2:
            cells.append(_num(values[0] - values[1]) if None not in values else "-")
        rows.append(f"| {r + 1} | " + " | ".join(cells) + " |")
    if c.verdict.interval is not None:
        i = c.verdict.interval
        rows += ["", f"Pick - baseline: mean {_num(i.mean)} {c.unit}, 95% CI {_num(i.low)} .. {_num(i.high)} "
                     f"({c.verdict.method})."]
    return "\n".join(rows)


def _max_model_len_table(candidates: Sequence[tuple[int, float]]) -> str:
    rows = ["## max_model_len candidates", "",
            "From the traffic's prompt + output lengths (every request of the log): longer requests are rejected.",
            "", "| max_model_len | requests rejected |", "|---|---|"]
    rows += [f"| {length} | {share:.2%} |" for length, share in candidates]
    return "\n".join(rows)


def _commands(inputs: ReportInputs) -> str:
    lines = ["## Reproduce and review", "", "```"]
    if inputs.reproduce_command:
        lines.append(inputs.reproduce_command)
    lines += [f"mlflow ui --backend-store-uri {inputs.tracking_uri}", "```"]
    if inputs.plots:
        lines += ["", "Plots: " + ", ".join(f"`plots/{p}`" for p in inputs.plots)]
    return "\n".join(lines)


# --- formatting -----------------------------------------------------------------------------------

def _done(m: Remeasured, label: str) -> int:
    return sum(v is not None for v in m.values[label])


def _spread(m: Remeasured, label: str) -> str:
    done = [v for v in m.values[label] if v is not None]
    return f"{_num(min(done))}..{_num(max(done))}" if done else "-"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _param(params: Mapping[str, Any], name: str) -> str:
    if name not in params:
        return "-"  # inactive in this config (a conditional knob)
    value = params[name]
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    return _num(value) if isinstance(value, float) else str(value)

