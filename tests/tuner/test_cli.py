"""`python -m tuner` end to end, in a subprocess, once per traffic format (tiny model on CPU)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from runtime import EngineConfig
from tests.tuner.cli import SHARED_TRACES, mlflow_runs, run_tuner, study_trials, tuner_args
from tuner.traffic import SAMPLE_TRAFFIC


def _openai_log(path: Path) -> Path:
    lines = []
    for i in range(16):
        messages = [{"role": "system", "content": "You are a helpful assistant. " * 8},
                    {"role": "user", "content": f"question {i}: " + "tell me more " * (3 + i)}]
        lines.append(json.dumps({"created": 1_700_000_000 + i // 2, "request": {"messages": messages},
                                 "usage": {"prompt_tokens": 40 + 3 * i, "completion_tokens": 8 + i}}))
    path.write_text("\n".join(lines) + "\n")
    return path


def _traffic(kind: str, tmp: Path) -> tuple[Path, list[str]]:
    if kind == "native":
        return SAMPLE_TRAFFIC, []
    if kind == "openai":
        return _openai_log(tmp / "requests.jsonl"), []
    names = {"azure": "azure_llm_2023_code.csv", "mooncake": "mooncake_fast25_synthetic_trace.jsonl"}
    path = SHARED_TRACES / names[kind]
    if not path.exists():
        pytest.skip(f"{path} is not here (the shared traces live outside the project)")
    return path, ["replay.long_prompts=truncate"]


def check_exports(out: Path, stdout: str) -> EngineConfig:
    best = EngineConfig.from_yaml(out / "best.yaml")
    assert best.metadata["study"] and best.metadata["traffic_sha256"] and best.metadata["verdict"]
    vllm = yaml.safe_load((out / "vllm.yaml").read_text())
    assert vllm["block-size"] > 0 and vllm["max-num-seqs"] == best.scheduler.max_num_seqs
    report = (out / "report.md").read_text()
    assert f"**Verdict: {best.metadata['verdict']}.**" in report  # the same words in best.yaml and the report
    assert f"Verdict: {best.metadata['verdict']}." in stdout  # and on the console
    assert "## Selection: fresh replays of the search window" in report and "## Proof: the " in report
    assert sorted(p.name for p in (out / "plots").iterdir()) == [  # no importances below 10 trials: it says why
        "capacity.png", "latency_cdf.png", "optimization_history.png"]
    assert "no parameter importances plot: " in report
    log = (out / "pagetune.log").read_text()  # every console line, with its time and source
    assert log.count("[pagetune][INFO] - trial ") >= 2 and f"Verdict: {best.metadata['verdict']}." in log
    return best


def check_mlflow(tmp: Path, study: str, n_trials: int) -> None:
    client, parents, children = mlflow_runs(tmp, study)
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert sorted(int(c.data.tags["pagetune.trial_number"]) for c in children) == list(range(n_trials))
    assert all(c.data.tags["mlflow.parentRunId"] == parents[0].info.run_id for c in children)
    for child in children:
        assert child.info.status in ("FINISHED", "FAILED")
        assert "block_size" in child.data.params or "use_tiers" in child.data.params
        artifacts = {a.path for a in client.list_artifacts(child.info.run_id)}
        assert "config.yaml" in artifacts
        if child.info.status == "FINISHED" and "capacity_rps" in child.data.metrics:
            assert "latencies.csv" in artifacts
        if child.data.tags["pagetune.trial_status"] == "pruned":  # stopped at the incumbent's capacity, on purpose
            assert child.info.status == "FINISHED" and "capacity_rps" not in child.data.metrics
            assert child.data.tags["mlflow.note.content"].startswith("Stopped early: ")
        if "capacity_rps" in child.data.metrics:
            assert child.data.tags["pagetune.trial_status"] == "ok"
    assert any("capacity_rps" in c.data.metrics for c in children)
    parent_files = {a.path for a in client.list_artifacts(parents[0].info.run_id)}
    assert {"best.yaml", "vllm.yaml", "report.md"} <= parent_files
    verdict = parents[0].data.tags["pagetune.verdict"]
    assert verdict and parents[0].data.tags["mlflow.note.content"].startswith(f"**Verdict: {verdict}.**")
    params = parents[0].data.params  # what the study measures
    assert {"fingerprint", "traffic_sha256", "objective", "slo.ttft_s", "baseline", "model"} <= set(params)
    assert client.get_experiment_by_name("pagetune").tags["mlflow.experimentKind"] == "custom_model_development"


@pytest.mark.parametrize("kind", ["native", "openai", "azure", "mooncake"])
def test_cli_end_to_end_per_format(kind, tmp_path):
    traffic, extra = _traffic(kind, tmp_path)
    args = tuner_args(tmp_path, traffic, *extra, study=kind)
    result = run_tuner(args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "best.yaml:" in result.stdout and "mlflow ui --backend-store-uri" in result.stdout
    check_exports(tmp_path / f"out-{kind}", result.stdout)
    trials = study_trials(tmp_path, kind)
    assert len(trials) == 2 and trials[0].user_attrs["pagetune.baseline"]
    check_mlflow(tmp_path, kind, 2)


def test_missing_traffic_is_a_one_line_error(tmp_path):
    args = [a for a in tuner_args(tmp_path, SAMPLE_TRAFFIC) if not a.startswith("+traffic=")]
    result = run_tuner(args, cwd=tmp_path, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "error: traffic is not set: pass the request log, e.g. `python -m tuner +traffic=logs.jsonl`")
    assert not (tmp_path / "out-t").exists()  # a refused command leaves no output folder


def test_bad_traffic_line_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "prompt_tokens": 8, "output_tokens": 4}\n{"timestamp": 1, "prompt_tokens": -3, '
                   '"output_tokens": 4}\n')
    result = run_tuner(tuner_args(tmp_path, bad), cwd=tmp_path, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith(f"error: {bad}:2: ")


def test_help_and_cfg_job_behave_like_hydra(tmp_path):
    help_out = run_tuner([sys.executable, "-m", "tuner", "--help"], cwd=tmp_path, timeout=120)
    assert help_out.returncode == 0 and "== Config ==" in help_out.stdout
    cfg = run_tuner([*tuner_args(tmp_path, SAMPLE_TRAFFIC)[:4], "--cfg", "job"], cwd=tmp_path, timeout=120)
    assert cfg.returncode == 0, cfg.stderr[-2000:]
    assert yaml.safe_load(cfg.stdout)["traffic"] == str(SAMPLE_TRAFFIC)


def test_traffic_too_long_for_the_model_stops_with_one_line(tmp_path):
    """3 of 4 requests need more than max_model_len 64: the run stops before any trial, naming the way out."""
    long = tmp_path / "long.jsonl"
    long.write_text("".join(f'{{"timestamp": {i}, "prompt_tokens": {n}, "output_tokens": 8}}\n'
                            for i, n in enumerate((16, 100, 200, 300))))
    result = run_tuner([*tuner_args(tmp_path, long), "runtime.scheduler.max_model_len=64"], cwd=tmp_path, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: {long}: 3 of 4 requests (75.0%) need more than max_model_len 64 tokens (prompt + output) and would "
        "be rejected, above replay.max_rejected_share 5%: pass replay.long_prompts=truncate, or raise "
        "runtime.scheduler.max_model_len (the model allows 4096)")
    assert not (tmp_path / "out-t").exists()


def test_outputs_too_long_even_truncated_do_not_suggest_truncating(tmp_path):
    """With prompts truncated already, 2 of 3 outputs alone reach max_model_len 64: the advice says so."""
    long = tmp_path / "long.jsonl"
    long.write_text("".join(f'{{"timestamp": {i}, "prompt_tokens": 16, "output_tokens": {n}}}\n'
                            for i, n in enumerate((8, 64, 90))))
    result = run_tuner([*tuner_args(tmp_path, long), "runtime.scheduler.max_model_len=64",
                        "replay.long_prompts=truncate"], cwd=tmp_path, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: {long}: 2 of 3 requests (66.7%) need more than max_model_len 64 tokens (prompt + output) and would "
        "be rejected, above replay.max_rejected_share 5%: their outputs alone reach it, even with prompts "
        "truncated: raise runtime.scheduler.max_model_len (the model allows 4096)")
