"""executor=sim: trials measured by the real measurement code on the simulated engine, in this process."""

from __future__ import annotations

from runtime import EngineConfig
from tests.runtime.sim.sim_factories import write_tiny_profile
from tuner.config import ObjectiveName, SloConfig
from tuner.traffic import SAMPLE_TRAFFIC, load_traffic, select
from tuner.trials.job import MeasurePlan, TrialJob, TrialStatus
from tuner.trials.sim import SimExecutor

SLO = SloConfig(ttft_s=0.3, tpot_s=0.02)


def _job(number: int = 0, **scheduler) -> TrialJob:
    config = EngineConfig.from_mapping({"model": {"name": "tiny"}, "scheduler": {"max_model_len": 1024, **scheduler},
                                        "cache": {"device_memory_gb": 0.05}})
    return TrialJob(number, config, None, "w", MeasurePlan(ObjectiveName.capacity, SLO, repeats=1))


def _requests():
    return select(load_traffic(SAMPLE_TRAFFIC, vocab_size=2048, max_model_len=1024).requests, max_requests=60)


def _run(executor: SimExecutor, job: TrialJob):
    return executor.run(job, _requests(), lambda *_: None, lambda _: True, 60.0)


def test_a_simulated_trial_is_measured_and_repeats_exactly(tmp_path):
    executor = SimExecutor(write_tiny_profile(tmp_path))
    first, again = _run(executor, _job()), _run(executor, _job())
    assert first.status is again.status is TrialStatus.ok
    assert first.measurement.values == again.measurement.values  # the virtual clock: no noise
    assert first.measurement.values[0] > 0
    assert [p.scale for p in first.measurement.probes] == [p.scale for p in again.measurement.probes]


def test_fewer_running_sequences_lower_the_simulated_capacity(tmp_path):
    executor = SimExecutor(write_tiny_profile(tmp_path))
    wide, narrow = _run(executor, _job()), _run(executor, _job(max_num_seqs=2))
    assert narrow.measurement.values[0] < wide.measurement.values[0]


def test_a_config_the_profiled_gpu_cannot_hold_is_infeasible(tmp_path):
    executor = SimExecutor(write_tiny_profile(tmp_path))
    outcome = _run(executor, _job(max_num_batched_tokens=8192, max_num_seqs=512))
    assert outcome.status is TrialStatus.infeasible
    assert outcome.reason.startswith("cache: KV pool of tier 0 (block_size 16) holds")


def test_the_executor_describes_the_profiled_gpu_as_simulated(tmp_path):
    path = write_tiny_profile(tmp_path)
    executor = SimExecutor(path)
    hw = executor.describe(EngineConfig())
    assert (hw.device_type, hw.name, hw.memory_gb) == ("cuda", "Test GPU", 1.0)
    assert hw.summary == "1 x Test GPU (simulated: tiny-profile.json)"
    assert executor.label == f"simulated (profile: {path}, tiny on Test GPU (torch 2.13.0))"
