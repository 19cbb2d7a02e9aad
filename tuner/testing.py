"""A test double of the trial executor with a known capacity and known noise (public, as `optuna.testing` is:
the tests and `experiments.verdict_power` use it).

It runs the real measurement (`tuner.measure.measure`: probes, majority repeats, bracket and bisect,
the checkpoint) on replays it synthesizes instead of replaying through an engine: each replay's
effective capacity is the config's true capacity times exp(N(0, noise)), and SLO attainment falls
off linearly past it. Everything above the executor (the Optuna study, the incumbent pruner, the
finalists, the interval, the verdict) is the real code. Used where a real run cannot control the
truth: the A/A test and the known-better test.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from pathlib import Path

import optuna

from runtime import EngineConfig
from tuner.config import (
    AppConfig,
    ParamConfig,
    ReplayConfig,
    SearchConfig,
    SloConfig,
    TunerConfig,
    ValidationConfig,
)
from tuner.measure.job import Hardware, ReplaySummary, TrialJob, TrialOutcome, TrialStatus
from tuner.measure.measure import measure
from tuner.measure.metrics import CLEAR_PASS_LOAD, decisive_failures
from tuner.measure.plan import Rates
from tuner.results.conclude import Conclusion, conclude
from tuner.search.baseline import baseline_config
from tuner.search.objective import Objective
from tuner.search.recorder import TrialRecorder
from tuner.search.samplers import build_pruner, build_sampler
from tuner.search.space import SearchSpace
from tuner.search.study import TrialFailed
from tuner.tracking import FallbackTracker
from tuner.traffic import SAMPLE_TRAFFIC, ReplayWindow, TrafficRequest, arrival_rate

FALLOFF = 2.0  # attainment lost per unit of load past capacity


class FakeExecutor:
    def __init__(self, capacity_of: Callable[[EngineConfig], float], noise: float, seed: int) -> None:
        self.capacity_of = capacity_of  # req/s the config truly sustains
        self.noise = noise  # sd of log(effective capacity) per replay
        self.rng = random.Random(seed)
        self.replays = 0

    def describe(self, config: EngineConfig) -> Hardware:
        return Hardware("cpu", "CPU fake x 1 cores", None, "CPU fake", "none")

    def run(self, job: TrialJob, requests: Sequence[TrafficRequest], on_progress, on_checkpoint,
            timeout_s: float) -> TrialOutcome:
        rate, truth, slo = arrival_rate(requests), self.capacity_of(job.config), job.plan.slo

        def replay(scale: float) -> ReplaySummary:
            self.replays += 1
            load = scale * rate / (truth * math.exp(self.rng.gauss(0.0, self.noise)))
            attainment = 1.0 if load <= 1 else max(0.0, 1.0 - FALLOFF * (load - 1.0))
            passed = attainment >= slo.attainment
            misses = len(requests) - round(attainment * len(requests))
            decisive = load <= CLEAR_PASS_LOAD if passed else misses >= decisive_failures(len(requests), slo)
            metrics = {"slo_attainment": attainment, "slo_load": load, "goodput_rps": attainment * scale * rate,
                       "busy_s": 1.0}
            return ReplaySummary(scale, passed, decisive, metrics)

        span = requests[-1].arrival_s - requests[0].arrival_s
        measurement, stopped = measure(replay, job.plan, span, on_checkpoint)
        status = TrialStatus.pruned if stopped is not None else TrialStatus.ok
        return TrialOutcome(status, measurement, "stopped" if stopped else None, checkpoint=stopped)

    def close(self) -> None:
        pass


def window(key: str, n: int = 100, rate: float = 1.0) -> ReplayWindow:
    requests = tuple(TrafficRequest(f"{key}{i}", i / rate, (5, 6, 7), 4, f"fake:{i}") for i in range(n))
    return ReplayWindow(key, requests, arrival_rate(requests))


def fake_app(*, seed: int = 0, trials: int = 10, finalists: int = 3, select_rounds: int = 3, proof_rounds: int = 8,
             repeats: int = 3) -> AppConfig:
    """Two knobs of three values each; the baseline (vLLM's CPU defaults) sits outside the choices."""
    space = SearchConfig(params={
        "block_size": ParamConfig(path="runtime.cache.block_size", type="categorical", choices=[8, 16, 32]),
        "max_num_seqs": ParamConfig(path="runtime.scheduler.max_num_seqs", type="categorical",
                                    choices=[64, 128, 256]),
    })
    return AppConfig(traffic=SAMPLE_TRAFFIC, runtime=EngineConfig.from_flat("tiny", device="cpu"), search=space,
                     slo=SloConfig(), tuner=TunerConfig(n_trials=trials, finalists=finalists, repeats=repeats,
                                                        n_startup_trials=4, warmup_requests=0, seed=seed),
                     validation=ValidationConfig(select_rounds=select_rounds, proof_rounds=proof_rounds),
                     replay=ReplayConfig(min_window_s=0.0))  # the fake's capacity is not a rate in time


def run_fake_study(tmp: Path, executor: FakeExecutor, seed: int, **app_changes) -> tuple[Conclusion, optuna.Study]:
    """A whole study, search to verdict, on the fake executor: real Optuna, real pruner, real conclusion."""
    app, study = run_fake_search(tmp, executor, seed, **app_changes)
    return conclude(executor, app.measuring, app.validation, study, window("search"), window("validation", 40)), study


def run_fake_search(tmp: Path, executor: FakeExecutor, seed: int, **app_changes) -> tuple[AppConfig, optuna.Study]:
    """The search of `run_fake_study`, its trials in an in-memory study; the conclusion not yet made."""
    app = fake_app(seed=seed, **app_changes)
    hardware = executor.describe(app.runtime)
    space = SearchSpace.from_config(app.search, app.runtime.inert_fields(hardware.device_type))
    baseline, _ = baseline_config(app, hardware, space)
    search = window("search")
    study = optuna.create_study(sampler=build_sampler(app.tuner), pruner=build_pruner(app.tuner),
                                directions=list(app.tuner.directions))
    space.enqueue_baseline(study, space.values_of(baseline))
    tracker = FallbackTracker(tmp / f"fallback-{seed}.jsonl", "test")
    rates = Rates(search.rate_rps, search.rate_rps, search.rate_rps)
    runner = Objective(app.measuring, app.runtime, app.quality, space, executor, search, rates, baseline,
                       TrialRecorder(tracker, "parent"))
    study.optimize(runner, n_trials=app.tuner.n_trials, catch=(TrialFailed,))
    return app, study
