"""The step log of a real engine: one row per one-tier step with its scheduled sequences and host time."""

from __future__ import annotations

from runtime import EngineConfig, LLMEngine, StepLog, StepRow
from tests.runtime.sim.test_sim_engine import Recording
from tuner.traffic import TrafficRequest
from tuner.trials.replay import ReplayClock, replay


def test_the_step_log_times_every_step_of_a_replay_with_its_host_time():
    config = EngineConfig.from_flat("tiny", device="cpu", device_memory_gb=0.05, max_model_len=256,
                                    max_num_batched_tokens=64, max_num_seqs=4, block_size=16)
    clock = ReplayClock()
    engine = LLMEngine(config, clock=clock)
    log = StepLog(engine)
    recording = log.runner = Recording(log.runner)  # what the engine scheduled, step by step
    requests = tuple(TrafficRequest(f"r{i}", 0.001 * i, tuple(range(5, 25 + 10 * i)), 6 + i, "test") for i in range(5))
    result = replay(engine, clock, requests)
    assert len(result.records) == 5
    assert [row.seqs for row in log.rows] == [len(step) for step in recording.steps]
    assert all(isinstance(row, StepRow) and row.variant == "bs16/auto/eager" for row in log.rows)
    assert all(row.seconds > 0 and row.host_s > 0 for row in log.rows)
