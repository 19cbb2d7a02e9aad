"""The step log of a real engine: one row per step with its scheduled sequences and host time, a step over
several tiers with the further tiers' shapes."""

from __future__ import annotations

from runtime import EngineConfig, LLMEngine, StepLog, StepRow
from tests.runtime.sim.test_sim_engine import Recording
from tuner.measure.replay import ReplayClock, replay
from tuner.traffic import TrafficRequest


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
    assert all(row.seconds > 0 and row.host_s > 0 and row.others == () for row in log.rows)


def test_a_step_over_two_tiers_is_logged_with_both_tiers_shapes():
    tiers = [{"max_len": 32, "block_size": 16, "share": 0.5}, {"max_len": 1 << 20, "block_size": 32, "share": 0.5}]
    config = EngineConfig.from_flat("tiny", device="cpu", device_memory_gb=0.05, max_model_len=256,
                                    max_num_batched_tokens=64, max_num_seqs=4, block_tiers=tiers)
    clock = ReplayClock()
    engine = LLMEngine(config, clock=clock)
    log = StepLog(engine)
    recording = log.runner = Recording(log.runner)
    # a short prompt (tier 0, up to 32 tokens) and a long one (tier 1), arriving together
    requests = (TrafficRequest("short", 0.0, tuple(range(5, 15)), 4, "test"),
                TrafficRequest("long", 0.0, tuple(range(5, 65)), 4, "test"))
    replay(engine, clock, requests)
    assert len(log.rows) == len(recording.steps)
    tiered = [row for row in log.rows if row.others]
    assert tiered and all(row.variant == "bs16/auto/eager" and len(row.others) == 1 for row in tiered)
    assert all(row.others[0][0] == "bs32/auto/eager" for row in tiered)
    first = log.rows[0]  # both prompts' first chunks: 10 tokens in tier 0, 54 of the long one in tier 1
    assert (first.prefill_tokens, first.seqs, first.others) == (10, 2, (("bs32/auto/eager", 54, 54 * 54, 0, 0),))
