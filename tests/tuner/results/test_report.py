"""report.md from a conclusion built by hand: the verdict first, exact lines."""

from __future__ import annotations

from runtime import EngineConfig
from tuner.results.conclude import Conclusion
from tuner.results.finalists import Candidate, Remeasured
from tuner.results.report import ReportInputs, headline_lines, render_report
from tuner.results.verdict import paired_interval, verdict

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
