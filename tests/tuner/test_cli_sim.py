"""`python -m tuner executor=sim`: the quick start on a GPU profile, in a subprocess; every output says simulated."""

from __future__ import annotations

import re
import sys

import pytest
import torch

from runtime import EngineConfig, load_profile, model_info
from tests.runtime.sim.sim_factories import write_tiny_profile
from tests.tuner.cli import ROOT, mlflow_runs, run_tuner, tuner_args
from tuner.traffic import SAMPLE_TRAFFIC


def test_the_simulated_quick_start_says_simulated_everywhere(tmp_path):
    profile = write_tiny_profile(tmp_path)
    args = [a for a in tuner_args(tmp_path, SAMPLE_TRAFFIC, study="sim", trials=6) if a != "executor=real"]
    args = [a for a in args if not a.startswith(("replay.max_requests=", "replay.time_scale="))]
    result = run_tuner([*args, "executor=sim", f"executor.profile={profile}", "slo.ttft_s=0.3", "slo.tpot_s=0.02"],
                       cwd=tmp_path, timeout=300)  # the bound on its time: a shared host's load is not a failure
    assert result.returncode == 0, result.stderr[-3000:]
    label = f"simulated (profile: {profile}, tiny on Test GPU (torch 2.13.0))"
    assert f"figures are {label}" in result.stdout
    assert "device: 1 x Test GPU (simulated: tiny-profile.json)" in result.stdout
    # the step-time model cannot see the kernels' path thresholds nor swap's cost: a simulated study leaves them
    assert ("not searched, no effect in simulation: preemption_mode, swap_space, flash_min_len, split_kv_min_len"
            in result.stdout)
    assert f"Figures: {label}" in result.stdout
    out = tmp_path / "out-sim"
    best = EngineConfig.from_yaml(out / "best.yaml")
    assert best.metadata["figures"] == label
    assert best.metadata["hardware"] == "1 x Test GPU (simulated: tiny-profile.json)"
    assert f"- Figures: {label}" in (out / "report.md").read_text()
    _, parents, children = mlflow_runs(tmp_path, "sim")
    assert parents[0].data.tags["pagetune.figures"] == label
    assert len(children) == 6 and {c.data.tags["pagetune.figures"] for c in children} == {label}


def test_a_missing_profile_is_a_one_line_error_with_the_command_that_makes_it(tmp_path):
    args = [a for a in tuner_args(tmp_path, SAMPLE_TRAFFIC) if a != "executor=real"]
    result = run_tuner([*args, "executor=sim", f"executor.profile={tmp_path / 'none.json'}"], cwd=tmp_path,
                       timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: executor.profile: no GPU profile at {tmp_path / 'none.json'}. Make one on the GPU to simulate: "
        f"python -m runtime.profile model=llama-3-8b out={tmp_path / 'none.json'}")
    assert not (tmp_path / "out-t").exists()


def test_sim_plus_real_measures_the_finalists_for_real_and_refits_the_profile(tmp_path):
    """A profile that says CPU, so the real re-measurements run the same knobs the simulated search chose."""
    profile = write_tiny_profile(tmp_path, device_type="cpu")
    args = [a for a in tuner_args(tmp_path, SAMPLE_TRAFFIC, study="sr", trials=3) if a != "executor=real"]
    result = run_tuner([*args, "executor=sim", f"executor.profile={profile}", "tuner.fidelity=sim+real"],
                       cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    out = tmp_path / "out-sr"
    report = (out / "report.md").read_text()
    section = report.split("## Simulated and measured\n\n")[1].split("\n\n")[0].splitlines()
    # out of sample first (the held-out window, simulated after the search), then in sample, labelled
    assert section[0].startswith("- held-out window, out of sample (no trial replayed it")
    assert section[1].startswith("-   ") and "simulated" in section[1] and "measured" in section[1]
    in_sample = section.index("- search window, in sample (the simulated values that chose the configs):")
    baseline = section[in_sample + 1]
    assert baseline.startswith("-   baseline: simulated ") and "simulation error" in baseline
    assert section[-2].startswith("- step times of tiny-profile.json on ") and "(out of sample)" in section[-2]
    assert section[-1].startswith("- refitted with them (profile-refit.json; in sample from now on")
    refit = load_profile(out / "profile-refit.json")
    assert refit.notes[-1].startswith("refitted with ") and len(refit.samples["bs16/auto/eager"]) > 0
    assert EngineConfig.from_yaml(out / "best.yaml").metadata["figures"].endswith(
        "; the finalists, the baseline and the verdict measured on the real runtime")
    client, parents, _ = mlflow_runs(tmp_path, "sr")
    assert "profile-refit.json" in {a.path for a in client.list_artifacts(parents[0].info.run_id)}


SHIPPED = ROOT / "conf" / "profiles"


@pytest.mark.parametrize("name, model", [("h200-llama-3-8b.json", "llama-3-8b"), ("h200-qwen2-7b.json", "qwen2-7b")])
def test_the_shipped_h200_profiles_load(name, model):
    """Both measured by `python -m runtime.profile` on one H200 (2026-12-06) on the runtime of piecewise graphs and
    async scheduling: every variant's three paths, a second tier's cost and the host time, as the command wrote
    them (not refitted)."""
    profile = load_profile(SHIPPED / name)
    assert (profile.model, profile.device.name, profile.device.type, profile.grid) == (model, "NVIDIA H200", "cuda",
                                                                                      "full")
    assert profile.info == model_info(model)  # the shape it was measured with is the preset's
    assert sorted(profile.coefficients) == sorted(f"bs{b}/{d}/{g}" for b in (8, 16, 32) for d in ("auto", "fp8_e4m3")
                                                  for g in ("eager", "graph", "piecewise"))
    assert profile.fit_error.points == 150 and profile.command.startswith("python -m runtime.profile model=" + model)
    assert profile.host_model.predict(256) > profile.host_model.predict(1) > 0
    assert 0.001 < profile.tier_s < 0.002  # timed over two tiers: 1.51 ms (Llama-3-8B), 1.58 ms (Qwen2-7B)
    assert profile.notes == (f"tier_s {profile.tier_s * 1e3:.2f} ms: a tier past the first, from "
                             f"{14 if model == 'llama-3-8b' else 16} steps over two tiers",)


@pytest.mark.skipif(torch.cuda.is_available(), reason="auto runs the real runtime on a GPU")
@pytest.mark.slow
def test_the_readme_quick_start_simulates_the_shipped_h200_profile_and_reads_believably(tmp_path):
    """The README's quick start as written (cwd: a fresh folder), on this CPU: executor=auto simulates, and what it
    reports is a rate an 8B model on one H200 serves (issue 32: not the tens of thousands of req/s a burst drains
    at). 6.5 minutes on a shared 2-core machine: the conclusion's rounds are most of it."""
    command = [sys.executable, "-m", "tuner", f"+traffic={ROOT / 'tuner' / 'data' / 'rag.jsonl'}", "tuner.n_trials=6"]
    result = run_tuner(command, cwd=tmp_path, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    (capacity,) = re.findall(r"^Capacity of the exported config on the proof window: ([0-9.]+) req/s", result.stdout,
                             re.MULTILINE)
    assert 1.0 < float(capacity) < 50.0, result.stdout[-3000:]
    assert "windows: search 1406 requests over 87.23 s (16.11 req/s), capacities up to 23.42 req/s" in result.stdout
    profile = SHIPPED / "h200-llama-3-8b.json"
    assert f"executor: sim (no GPU here: {profile} is simulated; executor=real runs the runtime on this CPU)" \
        in result.stdout
    assert "simulating llama-3-8b (the profile's model) in place of runtime.model.name tiny" in result.stdout
    assert f"Figures: simulated (profile: {profile}, llama-3-8b on NVIDIA H200 (" in result.stdout
    (out,) = (tmp_path / "outputs").iterdir()
    assert EngineConfig.from_yaml(out / "best.yaml").metadata["hardware"] == \
        "1 x NVIDIA H200 (simulated: h200-llama-3-8b.json)"
