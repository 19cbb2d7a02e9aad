"""A trace whose requests arrive in groups at one instant: no rate meets the SLO for any config, and the study
still answers (simulated, `executor=sim`).

`data/mooncake_grouped.jsonl` is the first 48 requests of ../shared/traces/mooncake_fast25_synthetic_trace.jsonl
with each timestamp floored to 3 s (`timestamp // 3000 * 3000`): 5 groups of 4 to 13 requests at one instant,
like a conversation log stamped to the second.
"""

from __future__ import annotations

from pathlib import Path

from runtime import EngineConfig
from tests.tuner.cli import ROOT, mlflow_runs, run_tuner, tuner_args

GROUPED = Path(__file__).resolve().parent / "data" / "mooncake_grouped.jsonl"
SHIPPED_PROFILE = ROOT / "conf" / "profiles" / "h200-llama-3-8b.json"


def test_grouped_arrivals_end_with_p99s_at_the_trace_rate_a_ranking_and_a_proposed_slo(tmp_path):
    args = [a for a in tuner_args(tmp_path, GROUPED, study="g", trials=2)
            if not a.startswith(("executor=", "model=", "runtime.", "replay."))]
    result = run_tuner([*args, "executor=sim", f"executor.profile={SHIPPED_PROFILE}",
                        "replay.long_prompts=truncate", "replay.min_window_s=0"], cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert ("arrivals: 39 of 39 requests (100%) arrive with others at one instant (4 distinct arrival times, up to "
            "13 at once)") in out  # said before the first trial
    assert out.index("arrivals: ") < out.index("trial 0 (baseline)")
    verdict = ("simulated: no capacity: no config meets the SLO at any rate tried; keep the baseline; trial 1 comes "
               "closest at the trace's own rate (ranking in the report) (measure it on the GPU with "
               "tuner.fidelity=sim+real)")
    assert f"Verdict: {verdict}." in out
    assert ("No rate tried meets the SLO for any config. At the trace's own rate (4.222 req/s), ranked by SLO load"
            in out)
    # the config that holds TPOT p99 at 0.18 s ranks above the baseline's 0.22 s
    assert ("  1. trial 1: TTFT p99 2.146 s, TPOT p99 0.179 s, 79.5% of requests meet the SLO, SLO load 1.795\n"
            "  2. baseline: TTFT p99 2.154 s, TPOT p99 0.2247 s, 79.5% of requests meet the SLO, SLO load 2.247\n"
            "Proposed SLO for a capacity search: slo.ttft_s=2.2 slo.tpot_s=0.18 (trial 1 meets it at the trace's own "
            "rate)\n") in out
    assert "every request is slower" not in out and "re-measuring" not in result.stderr
    best = EngineConfig.from_yaml(tmp_path / "out-g" / "best.yaml")
    assert best.metadata["verdict"] == verdict
    ranking = best.metadata["at_trace_rate"]["ranking"]
    assert [r["config"] for r in ranking] == ["trial 1", "baseline"]
    assert best.metadata["at_trace_rate"]["proposed_slo"] == {"ttft_s": 2.2, "tpot_s": 0.18}
    report = (tmp_path / "out-g" / "report.md").read_text()
    assert "## At the trace's own rate: no config has a capacity" in report and "## Proof" not in report
    _, parents, _ = mlflow_runs(tmp_path, "g")
    assert parents[0].data.tags["mlflow.note.content"].startswith(f"**Verdict: {verdict}.**")
