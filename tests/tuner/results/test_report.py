"""report.md from a conclusion built by hand: the verdict first, exact lines."""

from __future__ import annotations

from runtime import EngineConfig
from tuner.config import SloConfig
from tuner.results.conclude import Conclusion
from tuner.results.finalists import Candidate, Remeasured
from tuner.results.no_capacity import AtTraceRate, NoCapacity, empty_remeasured, no_capacity_verdict
from tuner.results.report import ReportInputs, headline_lines, render_report, study_note, verdict_text
from tuner.results.verdict import paired_interval, verdict
from tuner.traffic import ReplayWindow

BASE = Candidate("baseline", 0, EngineConfig(), 10.0,
                 {"use_tiers": False, "block_size": 16, "max_num_seqs": 256, "max_num_batched_tokens": None})
PICK = Candidate("trial 7", 7, EngineConfig.from_flat("tiny", block_size=32, max_num_seqs=64), 13.0,
                 {"use_tiers": False, "block_size": 32, "max_num_seqs": 64, "max_num_batched_tokens": 2048})
OTHER = Candidate("trial 4", 4, EngineConfig.from_flat("tiny", block_size=8), 11.5,
                  {"use_tiers": False, "block_size": 8, "max_num_seqs": 256, "max_num_batched_tokens": None})


def conclusion(proof_pick: list[float | None], proof_base: list[float | None]) -> Conclusion:
    selection = Remeasured("search", {"baseline": [10.0, 9.5, 10.5], "trial 7": [12.0, 12.5, 11.5],
                                      "trial 4": [10.0, None, 11.0]}, {}, {}, ["trial 4 on the search window ..."],
                           {})
    proof = Remeasured("validation", {"trial 7": proof_pick, "baseline": proof_base}, {}, {}, [], {})
    interval = paired_interval(proof_pick, proof_base)
    return Conclusion(BASE, [PICK, OTHER], selection, PICK, proof, verdict(False, interval, "req/s", "held-out"),
                      "req/s")


def inputs(c: Conclusion, **changes) -> ReportInputs:
    fields = dict(study_name="demo", conclusion=c, objective="capacity",
                  slo="TTFT <= 2 s, TPOT <= 0.1 s, attainment 99.0%",
                  traffic="logs.jsonl (native, 120 requests, sha256 0123456789ab)",
                  windows="search 96 requests at 4 req/s; held out 24 requests at 3.5 req/s (as replayed)",
                  capacity_reading=["On the search window: 12 req/s = 3x the trace's recorded rate"],
                  inert=["flash_min_len"], search_lines=["10 trials: 6 measured, 3 stopped, 1 failed"],
                  max_model_len_candidates=[(2048, 0.05)], reproduce_command="python -m tuner +traffic=logs.jsonl",
                  notes=["trial 9: oom: out of memory"], plots=["capacity.png"])
    return ReportInputs(**{**fields, **changes})


def test_report_of_an_improvement():
    c = conclusion([12.0, 14.0, 13.0], [10.0, 10.0, 10.0])
    assert render_report(inputs(c)).splitlines() == [
        "# pagetune report: study `demo`",
        "",
        "**Verdict: improved: +3 req/s (+30.0%; 95% CI +0.5157 .. +5.484 req/s, +5.2% .. +54.8%).**",
        "",
        "- Exported (best.yaml): **trial 7**",
        "- Capacity of the exported config on the proof window: 13 req/s (median of 3 rounds)",
        "- On the search window: 12 req/s = 3x the trace's recorded rate",
        "- Method: paired t-interval (95%) over 3 interleaved rounds on the held-out window; the pick was "
        "chosen on other replays (the search window).",
        "- Figures: measured on the real runtime",
        "- SLO: TTFT <= 2 s, TPOT <= 0.1 s, attainment 99.0%",
        "- Traffic: logs.jsonl (native, 120 requests, sha256 0123456789ab)",
        "- Windows: search 96 requests at 4 req/s; held out 24 requests at 3.5 req/s (as replayed)",
        "- vllm.yaml was not measured on vLLM: it is the exported config as far as vLLM can express it",
        "",
        "## Knobs that differ",
        "",
        "Baseline vs the pick (trial 7).",
        "",
        "| knob | baseline | pick |",
        "|---|---|---|",
        "| block_size | 16 | 32 |",
        "| max_num_seqs | 256 | 64 |",
        "| max_num_batched_tokens | null | 2048 |",
        "",
        "Not searched, no effect on this device: flash_min_len.",
        "",
        "## Selection: fresh replays of the search window",
        "",
        "Each config measured once per interleaved round; median (min..max), req/s. The search's own value is "
        "the start of each measurement, never its result.",
        "",
        "| config | search value | median | min..max | rounds |",
        "|---|---|---|---|---|",
        "| baseline | 10 | 10 | 9.5..10.5 | 3 |",
        "| trial 7 (pick) | 13 | 12 | 11.5..12.5 | 3 |",
        "| trial 4 | 11.5 | 10.5 | 10..11 | 2 |",
        "",
        "## Proof: the validation window",
        "",
        "Interleaved rounds, pick and baseline back to back; req/s.",
        "",
        "| round | trial 7 | baseline | difference |",
        "|---|---|---|---|",
        "| 1 | 12 | 10 | 2 |",
        "| 2 | 14 | 10 | 4 |",
        "| 3 | 13 | 10 | 3 |",
        "",
        "Pick - baseline: mean 3 req/s, 95% CI 0.5157 .. 5.484 (paired t-interval (95%) over 3 interleaved "
        "rounds on the held-out window).",
        "",
        "## The search",
        "",
        "- 10 trials: 6 measured, 3 stopped, 1 failed",
        "",
        "## max_model_len candidates",
        "",
        "From the traffic's prompt + output lengths (every request of the log): longer requests are rejected.",
        "",
        "| max_model_len | requests rejected |",
        "|---|---|",
        "| 2048 | 5.00% |",
        "",
        "## Reproduce and review",
        "",
        "```",
        "python -m tuner +traffic=logs.jsonl",
        "mlflow ui --backend-store-uri sqlite:///mlflow.db",
        "```",
        "",
        "Plots: `plots/capacity.png`",
        "",
        "## Notes",
        "",
        "- trial 9: oom: out of memory",
    ]


def test_report_of_no_significant_improvement_exports_the_baseline():
    c = conclusion([12.0, 9.0, 11.0, None], [10.0, 10.0, 10.0, 10.5])
    lines = headline_lines(inputs(c))
    assert lines[0] == ("**Verdict: no significant improvement: keep the baseline (pick - baseline +0.6667 req/s "
                        "(+6.7%; 95% CI -3.128 .. +4.462 req/s, -31.3% .. +44.6%)).**")
    assert lines[2] == "- Exported (best.yaml): **baseline**; runner-up not exported: trial 7"
    assert lines[3] == "- Capacity of the exported config on the proof window: 10 req/s (median of 4 rounds)"
    assert "| 4 | - | 10.5 | - |" in render_report(inputs(c)).splitlines()
    assert c.exported is BASE and c.runner_up is PICK


def test_reproduce_command_names_the_study_and_masks_secrets():
    from tuner.results.summary import reproduce_command

    command = reproduce_command(["+traffic=logs.jsonl", "tuner.n_trials=6", "hydra.run.dir=/tmp/x",
                                 "storage.url=postgresql+psycopg://u:pw@db/optuna"], "logs-1a2b3c4d")
    assert command == ("python -m tuner +traffic=logs.jsonl tuner.n_trials=6 "
                       "storage.url=postgresql+psycopg://u:***@db/optuna tuner.study_name=logs-1a2b3c4d")


def test_a_simulated_verdict_says_so_in_the_line_itself_and_what_would_prove_it():
    c = conclusion([12.0, 14.0, 13.0], [10.0, 10.0, 10.0])
    assert verdict_text(c, simulated=True) == (
        "simulated: improved: +3 req/s (+30.0%; 95% CI +0.5157 .. +5.484 req/s, +5.2% .. +54.8%) (simulated, so its "
        "interval is the bisection's resolution, not noise; measure it on the GPU with tuner.fidelity=sim+real)")
    assert verdict_text(c, simulated=False) == c.verdict.headline
    lines = headline_lines(inputs(c, simulated=True))
    assert lines[0] == f"**Verdict: {verdict_text(c, simulated=True)}.**"
    assert study_note(inputs(c, simulated=True)).startswith(lines[0] + "\n")  # the MLflow run's description


def test_every_config_at_zero_gets_its_p99s_at_the_trace_rate_a_ranking_and_a_proposed_slo():
    window = ReplayWindow("search", (), 4.111)
    ranked = NoCapacity([AtTraceRate("trial 3", 2.757, 0.0799, 0.842, 1.482, ()),
                         AtTraceRate("baseline", 2.181, 0.2277, 0.789, 2.278, ())],
                        SloConfig(ttft_s=3.0, tpot_s=0.1), 4.111, [])
    empty = empty_remeasured(window, [BASE, PICK])
    c = Conclusion(BASE, [PICK], empty, BASE, empty, no_capacity_verdict(ranked, "baseline"), "req/s", ranked)
    report = render_report(inputs(c, capacity_reading=[], arrivals="38 of 38 requests (100%) arrive with others"))
    lines = report.splitlines()
    assert lines[2] == ("**Verdict: no capacity: no config meets the SLO at any rate tried; keep the baseline; trial 3 "
                        "comes closest at the trace's own rate (ranking in the report).**")
    assert lines[5:11] == [
        "- Method: no selection or proof: every config measured 0; one replay per config at the trace's own rate, "
        "ranked by SLO load.",
        "- **No rate tried meets the SLO for any config.** At the trace's own rate (4.111 req/s), ranked by SLO load "
        "(the ratio to the SLO of the request at the attainment target; <= 1 meets it):",
        "  1. trial 3: TTFT p99 2.757 s, TPOT p99 0.0799 s, 84.2% of requests meet the SLO, SLO load 1.482",
        "  2. baseline: TTFT p99 2.181 s, TPOT p99 0.2277 s, 78.9% of requests meet the SLO, SLO load 2.278",
        "- Proposed SLO for a capacity search: slo.ttft_s=3 slo.tpot_s=0.1 (trial 3 meets it at the trace's own rate)",
        "- Figures: measured on the real runtime"]
    assert "- Arrivals: 38 of 38 requests (100%) arrive with others" in lines
    assert "| 1 | trial 3 | 2.757 | 0.0799 | 84.2% | 1.482 |" in lines
    assert "## Selection: fresh replays of the search window" not in report and "## Proof" not in report
    assert "every request is slower" not in report


def test_a_window_shift_qualifies_the_verdict_in_the_headline():
    c = conclusion([12.0, 14.0, 13.0], [10.0, 10.0, 10.0])
    shift = ("baseline: 0.2877 req/s on the held-out window against 2.847 on the search window (x0.1): the two "
             "windows are different loads for this config, so the verdict speaks of the held-out window's traffic")
    lines = render_report(inputs(c, window_shifts=[shift])).splitlines()
    at = lines.index("- Windows: search 96 requests at 4 req/s; held out 24 requests at 3.5 req/s (as replayed)")
    assert lines[at + 1] == f"- **Windows differ**: {shift}"
