"""`python -m tuner executor=vllm search=vllm` end to end against the stand-in `vllm serve` (a subprocess, bounded
in time); without vLLM, one line saying how to install it; `--cfg job` composes without it."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import optuna
import yaml

from tests.tuner.cli import mlflow_runs, run_tuner, study_trials, tuner_args
from tuner.search.identity import PARTS_ATTR
from tuner.traffic import SAMPLE_TRAFFIC

STANDIN = str(Path(__file__).parent / "executors" / "vllm_standin.py")


def _vllm_args(tmp: Path, *extra: str, trials: int = 5) -> list[str]:
    base = [a for a in tuner_args(tmp, SAMPLE_TRAFFIC, study="v", trials=trials)
            if a not in ("executor=real", "runtime.cache.device_memory_gb=0.05")]
    return [*base, "executor=vllm", "search=vllm", f"executor.vllm.command=[{sys.executable},{STANDIN}]",
            f"executor.vllm.probe=[{sys.executable},{STANDIN},--probe]", f"executor.vllm.work_dir={tmp}/work",
            f"executor.vllm.cache_dir={tmp}/cache", "+executor.vllm.args.load_format=dummy", *extra]


def test_a_study_on_vllm_runs_each_trial_on_its_own_server_against_vllms_defaults(tmp_path, monkeypatch):
    monkeypatch.setenv("STANDIN_REFUSE", "max-num-partial-prefills=4")  # one trial's server will not start
    start = time.monotonic()
    result = run_tuner(_vllm_args(tmp_path), cwd=tmp_path, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert time.monotonic() - start < 180
    out = result.stdout
    assert "device: 1 x NVIDIA H200 (vLLM 0.26.0, vllm serve); baseline: vLLM's own defaults, no engine flag " \
           "(vLLM 0.26.0, vllm serve)" in out
    assert "Figures: measured on vLLM 0.26.0" in out
    work = tmp_path / "work"
    assert yaml.safe_load((work / "001-trial-0.yaml").read_text()) == {"model": "tiny", "load-format": "dummy"}
    trials = study_trials(tmp_path, "v")
    failed = [t for t in trials if t.state.name == "FAIL"]
    assert failed  # the sampler (seeded) drew max_num_partial_prefills=4: that trial failed, the study went on
    assert [t.user_attrs["reason"].split(": $ ")[0] for t in failed] == \
        ["vllm serve exited with code 1 before it was ready"] * len(failed)
    assert all(t.user_attrs["reason"].endswith("ValueError: the stand-in refuses max-num-partial-prefills=4")
               for t in failed)
    measured = [t for t in trials if t.state.name == "COMPLETE"]
    assert len(measured) + len(failed) == 5 and all(0 < t.user_attrs["setup_s"] < 30 for t in measured)
    for t in measured[1:]:
        written = yaml.safe_load((work / f"{t.number + 1:03d}-trial-{t.number}.yaml").read_text())
        assert written["max-num-seqs"] == t.params["max_num_seqs"] and written["load-format"] == "dummy"
    study = optuna.load_study(study_name="v", storage=f"sqlite:///{tmp_path}/optuna.db")
    assert study.user_attrs[PARTS_ATTR]["engine"] == {"vllm": "0.26.0", "model": "tiny",
                                                      "args": {"load_format": "dummy"}, "only_args": False}
    _, parents, children = mlflow_runs(tmp_path, "v")
    assert parents[0].data.tags["pagetune.figures"] == "measured on vLLM 0.26.0"
    assert len(children) == 5
    best = yaml.safe_load((tmp_path / "out-v" / "best.yaml").read_text())
    assert best["metadata"]["figures"] == "measured on vLLM 0.26.0"
    assert "vLLM 0.26.0" in json.dumps(best["metadata"])
    exported = yaml.safe_load((tmp_path / "out-v" / "vllm.yaml").read_text())
    if best["metadata"]["trial"] == 0:  # kept the baseline: the export is vLLM's defaults, no engine flag
        assert exported == {"model": "tiny"}
    else:
        assert exported["max-num-seqs"] == best["scheduler"]["max_num_seqs"]


def test_without_vllm_executor_vllm_stops_before_any_trial_saying_how_to_install_it(tmp_path):
    args = [a for a in tuner_args(tmp_path, SAMPLE_TRAFFIC) if a != "executor=real"]
    result = run_tuner([*args, "executor=vllm", "search=vllm"], cwd=tmp_path, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: executor=vllm: vLLM is not installed for {sys.executable}: pip install 'pagetune[vllm]' (vLLM "
        "0.26.0), or point executor.vllm.probe and executor.vllm.command at an environment that has it")
    assert not (tmp_path / "optuna.db").exists() or study_trials(tmp_path, "t") == []


def test_cfg_job_composes_executor_vllm_without_vllm(tmp_path):
    result = run_tuner([sys.executable, "-m", "tuner", "executor=vllm", "search=vllm", "--cfg", "job"], cwd=tmp_path,
                       timeout=60)
    assert result.returncode == 0, result.stderr
    job = yaml.safe_load(result.stdout)
    assert job["executor"]["kind"] == "vllm" and job["executor"]["vllm"]["command"] == ["vllm"]
    assert job["search"]["params"]["async_scheduling"]["path"] == "vllm.async_scheduling"
