"""executor=sim: trials measured by the real measurement code on the simulated engine, in this process."""

from __future__ import annotations

import dataclasses

from runtime import EngineConfig, VirtualClock, load_profile, sim_engine
from tests.runtime.sim.sim_factories import write_tiny_profile
from tuner.config import ObjectiveName, SloConfig
from tuner.executors.sim import SimExecutor
from tuner.measure.job import MeasurePlan, TrialJob, TrialStatus
from tuner.measure.measure import measure
from tuner.measure.metrics import certain_failures
from tuner.measure.outcome import probe_figures
from tuner.measure.replay import replay
from tuner.measure.window import WindowReplayer
from tuner.traffic import SAMPLE_TRAFFIC, load_traffic, select

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


def _replayers(tmp_path, plan: MeasurePlan) -> tuple[WindowReplayer, WindowReplayer]:
    """(the executor's replayer, one whose replays never stop early) over one simulated engine of a config
    with a capacity (two running sequences at most)."""
    clock = VirtualClock()
    engine = sim_engine(_job(max_num_seqs=2).config, load_profile(write_tiny_profile(tmp_path)), clock)

    def stopping(requests, **kwargs):
        return replay(engine, clock, requests, **kwargs)

    def whole(requests, **kwargs):
        return replay(engine, clock, requests, **{**kwargs, "stop_after_misses": None})

    return (WindowReplayer(stopping, _requests(), plan, lambda *_: None, lambda: 0.0),
            WindowReplayer(whole, _requests(), plan, lambda *_: None, lambda: 0.0))


def test_a_replay_stopped_at_its_first_certain_failure_decides_as_the_whole_replay(tmp_path):
    plan = _job().plan  # one replay a probe, as every simulated probe
    early, whole = _replayers(tmp_path, plan)
    assert early.stop_after == certain_failures(60, SLO) == 1
    (cut, _), (full, _) = measure(early, plan, early.span_s), measure(whole, plan, whole.span_s)
    assert cut.values == full.values and cut.values[0] > 0
    assert [(p.scale, p.passed) for p in cut.probes] == [(p.scale, p.passed) for p in full.probes]
    stopped = [i for i, p in enumerate(cut.probes) if p.replays[0].metrics["stopped"]]
    assert stopped and all(not cut.probes[i].passed for i in stopped)
    for i in stopped:  # fewer requests replayed: the point of stopping
        assert cut.probes[i].replays[0].metrics["busy_s"] < full.probes[i].replays[0].metrics["busy_s"]
    for a, b in zip(cut.probes, full.probes):  # every probe that ran whole has the very same figures
        if a.passed or not a.replays[0].metrics["stopped"]:
            assert a.replays[0].metrics == b.replays[0].metrics
    assert cut.metrics | {"replay_busy_s": 0.0} == full.metrics | {"replay_busy_s": 0.0}
    assert cut.latency_rows == full.latency_rows


def test_a_checkpoint_stopped_early_prunes_as_the_whole_replay(tmp_path):
    plan = dataclasses.replace(_job().plan, start_scale=64.0, checkpoint=True)  # far past the capacity: it fails
    early, whole = _replayers(tmp_path, plan)
    (_, cut), (_, full) = (measure(r, plan, r.span_s, lambda probe: probe.passed) for r in (early, whole))
    assert (cut.scale, cut.passed) == (full.scale, full.passed) == (64.0, False)
    assert cut.replays[0].metrics["stopped"] and not full.replays[0].metrics["stopped"]
    # the pruned trial's reason says how much of the window the stopped replay covered
    assert probe_figures(cut) == "x64: attainment 0.150, stopped once certain to fail: 10 of 60 requests replayed"
    assert probe_figures(full) == "x64: attainment 0.150"
