"""Which executor runs the trials: executor.kind and tuner.fidelity (no worker is started here)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from tests.runtime.sim.sim_factories import write_tiny_profile
from tuner.config import (
    CONF_DIR,
    AppConfig,
    ExecutorConfig,
    ParamConfig,
    SearchConfig,
    TunerConfigError,
    load_app_config,
)
from tuner.executors.replicas import ReplicasExecutor
from tuner.executors.selection import open_executors
from tuner.executors.sim import SimExecutor
from tuner.traffic import SAMPLE_TRAFFIC


def _app(**sections):
    return load_app_config({"traffic": str(SAMPLE_TRAFFIC), **sections})


def test_simulating_runs_the_profiles_model_and_says_so(tmp_path):
    path = write_tiny_profile(tmp_path)
    app = _app(executor={"kind": "sim", "profile": str(path)}, runtime={"model": {"name": "llama-3-8b"}})
    ex, app = open_executors(app)
    assert isinstance(ex.search, SimExecutor) and ex.measure is ex.search is ex.sim
    assert app.runtime.model.name == "tiny"
    assert ex.notes[0] == "simulating tiny (the profile's model) in place of runtime.model.name llama-3-8b"
    assert ex.figures == f"simulated (profile: {path}, tiny on Test GPU (torch 2.13.0))"


def test_sim_plus_real_needs_a_simulated_search():
    with pytest.raises(TunerConfigError, match=r"^tuner\.fidelity: sim\+real searches in simulation"):
        open_executors(_app(executor={"kind": "real"}, tuner={"fidelity": "sim+real"}))


def test_devices_on_the_real_runtime_run_replicas_and_search_the_shape(tmp_path):
    ex, app = open_executors(_app(executor={"kind": "real"}, devices=2, runtime={"model": {"name": "tiny"}}))
    try:
        assert isinstance(ex.search, ReplicasExecutor) and ex.measure is ex.search and ex.sim is None
        assert ex.search.describe(app.runtime).device_type == ("cuda" if torch.cuda.is_available() else "cpu")
        assert app.search.params["tensor_parallel_size"].choices == [1, 2]
        assert ex.notes == ("deployment: 2 devices; shapes TP 1 x 2 replicas, TP 2 x 1 replica (searched as "
                            "tensor_parallel_size); a capacity is the whole deployment's (least-outstanding-requests "
                            "balancer over the replicas)",
                            "executor: real, 2 devices: each trial's replicas are python -m runtime.serve servers, "
                            "measured over HTTP behind the least-outstanding-requests dispatcher (configs and logs in "
                            f"{ex.search.work_dir})")
    finally:
        ex.close()
    with pytest.raises(TunerConfigError, match=r"^tuner\.fidelity: sim\+real refits the profile from timed engine "
                                               r"steps, which a deployment of 2 devices"):
        open_executors(_app(executor={"kind": "sim", "profile": str(write_tiny_profile(tmp_path))}, devices=2,
                            tuner={"fidelity": "sim+real"}))


def test_a_bad_profile_names_executor_profile(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"model": "tiny"}')
    with pytest.raises(TunerConfigError, match=r"^executor\.profile: .*bad\.json: config: missing 'model_shape'"):
        open_executors(_app(executor={"kind": "sim", "profile": str(bad)}))


@pytest.mark.skipif(torch.cuda.is_available(), reason="auto runs the real runtime on a GPU")
def test_auto_without_a_gpu_simulates_the_profile_when_it_is_there(tmp_path):
    path = write_tiny_profile(tmp_path)
    ex, _ = open_executors(_app(executor={"profile": str(path)}))  # kind auto; this machine has no GPU
    try:
        assert isinstance(ex.search, SimExecutor) and ex.measure is ex.search
        assert ex.notes[0] == f"executor: sim (no GPU here: {path} is simulated; executor=real runs the runtime " \
                              "on this CPU)"
    finally:
        ex.close()
    missing = tmp_path / "none.json"
    ex, _ = open_executors(_app(executor={"profile": str(missing)}))
    try:
        assert ex.sim is None and ex.figures == "measured on the real runtime"
        assert ex.notes == (f"executor: real (no GPU here, and no GPU profile at {missing} to simulate)",)
    finally:
        ex.close()


NO_TIER_COST = "has no cost for a second block tier (tier_s 0)"
PROFILES = CONF_DIR / "profiles"


def _without_tier_cost(tmp_path: Path) -> Path:
    """The shipped Qwen2 profile as one measured before `runtime.profile` timed a second tier (tier_s 0)."""
    data = json.loads((PROFILES / "h200-qwen2-7b.json").read_text())
    path = tmp_path / "no-tier-cost.json"
    path.write_text(json.dumps({**data, "tier_s": 0.0}))
    return path


@pytest.mark.parametrize(
    "profile, warned", [(None, True), ("h200-llama-3-8b.json", False), ("h200-qwen2-7b.json", False)])
def test_a_profile_without_a_tier_cost_is_named_when_tiers_are_searched(profile, warned, tmp_path):
    path = PROFILES / profile if profile else _without_tier_cost(tmp_path)
    space = {"params": {"use_tiers": {"path": "tiers.enabled", "type": "categorical", "choices": [False, True]}}}
    ex, _ = open_executors(_app(executor={"kind": "sim", "profile": str(path)}, search=space))
    assert [n for n in ex.notes if NO_TIER_COST in n] == ([
        f"{path} {NO_TIER_COST}: simulated configs with block tiers pay nothing for it and look better than they "
        "are; python -m runtime.profile measures it now"] if warned else [])


def test_no_tier_warning_when_no_trial_can_use_tiers(tmp_path):
    path = _without_tier_cost(tmp_path)
    space = {"params": {"seqs": {"path": "runtime.scheduler.max_num_seqs", "type": "int", "low": 8, "high": 64}}}
    ex, _ = open_executors(_app(executor={"kind": "sim", "profile": str(path)}, search=space))
    assert not [n for n in ex.notes if NO_TIER_COST in n]
    tiers = {"block_tiers": [{"max_len": 2048, "block_size": 16, "share": 0.5},
                             {"max_len": 8192, "block_size": 32, "share": 0.5}]}
    ex, _ = open_executors(_app(executor={"kind": "sim", "profile": str(path)}, search=space,
                             runtime={"cache": tiers}))  # the runtime's own config has them
    assert [n for n in ex.notes if NO_TIER_COST in n] != []


def test_vllm_knobs_without_executor_vllm_are_refused(tmp_path):
    app = AppConfig(traffic=tmp_path / "t.jsonl", search=SearchConfig({
        "seqs": ParamConfig("runtime.scheduler.max_num_seqs", "int", low=8, high=64),
        "async_scheduling": ParamConfig("vllm.async_scheduling", choices=[None, True])}))
    with pytest.raises(TunerConfigError) as e:
        open_executors(dataclasses.replace(app, executor=ExecutorConfig(kind="real")))
    assert str(e.value) == ("search.params.async_scheduling: a vllm.* knob is a vLLM engine argument, which only "
                            "executor=vllm applies (search=vllm goes with executor=vllm)")
