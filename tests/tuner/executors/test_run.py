"""One trial as the worker runs it, in this process on the tiny CPU engine: the warm-up and the replays."""

from __future__ import annotations

from runtime import EngineConfig
from tests.tuner.tuner_factories import tiny_runtime
from tuner.config import ObjectiveName, SloConfig
from tuner.executors.run import WorkerState, run_trial
from tuner.measure.job import MeasurePlan, TrialJob, TrialStatus
from tuner.traffic import SAMPLE_TRAFFIC, load_traffic, select


class Quiet:
    def progress(self, probe, scale, done, total) -> None:
        pass

    def checkpoint(self, probe) -> bool:
        return True


def _trial(requests, warmup: int, state: WorkerState):
    plan = MeasurePlan(ObjectiveName.goodput, SloConfig(), repeats=2, warmup_requests=warmup)
    config = EngineConfig.from_mapping(tiny_runtime(scheduler={"max_model_len": 512}))
    return run_trial(TrialJob(0, config, None, "w", plan), requests, state, Quiet())


def test_the_warm_up_is_discarded_and_leaves_nothing_behind():
    """The sample shares prefixes between requests: a warm-up that left its blocks cached would hand the first
    measured replay free prefix hits. Every measured replay, warm-up or not, sees the same hits and rows."""
    # Arrivals 20x slower than logged: each request is done before the next comes (the idle gaps are skipped),
    # so which prefix blocks are cached when a request arrives does not depend on the machine's speed.
    requests = select(load_traffic(SAMPLE_TRAFFIC, vocab_size=2048, max_model_len=512).requests, max_requests=40,
                      time_scale=0.05)
    state = WorkerState()
    cold, warm = _trial(requests, 0, state), _trial(requests, 32, state)
    assert cold.status is warm.status is TrialStatus.ok
    for outcome in (cold, warm):
        replays = outcome.measurement.probes[0].replays
        assert len(replays) == 2 and outcome.measurement.metrics["replays"] == 2.0  # the warm-up is not one
        assert replays[0].metrics["prefix_hit_rate"] == replays[1].metrics["prefix_hit_rate"] > 0
        assert replays[0].metrics["requests"] == 40.0
    assert warm.measurement.probes[0].replays[0].metrics["prefix_hit_rate"] == \
        cold.measurement.probes[0].replays[0].metrics["prefix_hit_rate"]
    hits = [sorted((r["request_id"], r["cached_tokens"]) for r in o.measurement.latency_rows) for o in (cold, warm)]
    assert hits[0] == hits[1]
    assert warm.model_reused  # the second trial of the worker state reused the weights


def test_a_trial_whose_steps_are_logged_runs_synchronously_whatever_its_config_says():
    """sim+real re-measurements log their steps to refit the profile, which models the synchronous runtime: an
    async config (on a GPU, the default) is stepped synchronously there instead of refused by the step log."""
    requests = select(load_traffic(SAMPLE_TRAFFIC, vocab_size=2048, max_model_len=512).requests, max_requests=12,
                      time_scale=0.05)
    plan = MeasurePlan(ObjectiveName.goodput, SloConfig(), repeats=1)
    config = EngineConfig.from_mapping(tiny_runtime(scheduler={"max_model_len": 512, "async_scheduling": True}))
    outcome = run_trial(TrialJob(0, config, None, "w", plan, step_log=True), requests, WorkerState(), Quiet())
    assert outcome.status is TrialStatus.ok, outcome.reason
    assert len(outcome.steps) > 0
