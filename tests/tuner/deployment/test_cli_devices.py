"""`python -m tuner executor=sim devices=2`: the deployment's shape searched on the simulator, and named in the
console, report.md, best.yaml's metadata and vllm.yaml."""

from __future__ import annotations

import pytest
import yaml

from runtime import EngineConfig
from tests.runtime.sim.sim_factories import write_tiny_profile
from tests.tuner.cli import run_tuner, study_trials, tuner_args
from tuner.traffic import SAMPLE_TRAFFIC


@pytest.mark.slow
def test_a_two_device_study_searches_the_shape_and_exports_it(tmp_path):
    profile = write_tiny_profile(tmp_path)
    args = [a for a in tuner_args(tmp_path, SAMPLE_TRAFFIC, study="d2", trials=6) if a != "executor=real"]
    result = run_tuner([*args, "executor=sim", f"executor.profile={profile}", "devices=2", "slo.ttft_s=0.3",
                        "slo.tpot_s=0.02", "tuner.sampler=random", "tuner.seed=5"],  # seed 5 draws both degrees
                       cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert ("deployment: 2 devices; shapes TP 1 x 2 replicas, TP 2 x 1 replica (searched as tensor_parallel_size)"
            in result.stdout)
    assert "device: 2 x Test GPU (simulated: tiny-profile.json)" in result.stdout
    assert "needs 1 deployment(s) of 2 devices" in result.stdout
    degrees = {t.params.get("tensor_parallel_size") for t in study_trials(tmp_path, "d2")}
    assert degrees == {1, 2}
    out = tmp_path / "out-d2"
    best = EngineConfig.from_yaml(out / "best.yaml")
    d = best.tensor_parallel_size
    assert best.metadata["deployment"] == {"devices": 2, "tensor_parallel_size": d, "replicas": 2 // d}
    assert "all-reduce at TP [2] estimated, not measured" in best.metadata["figures"]
    vllm = (out / "vllm.yaml").read_text()
    assert yaml.safe_load(vllm)["tensor-parallel-size"] == d
    assert f"# deployment: {2 // d} replica(s) of this server, {d} GPU(s) each, on 2 GPUs" in vllm
    assert f"- Deployment: TP {d} x {2 // d} replica" in (out / "report.md").read_text()
