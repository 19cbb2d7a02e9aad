"""The capacity experiment's simulated side (`sim_capacity`): the simulated search as a trial runs it, one window
whole at a rate scale, a probe's verdict, and the capacity counted from below.
"""

from __future__ import annotations

from experiments.sim_lab import run_sim
from runtime import EngineConfig, GpuProfile, VirtualClock, sim_engine
from tuner.config import ObjectiveName, SloConfig
from tuner.measure.job import Measurement, MeasurePlan
from tuner.measure.metrics import summarize
from tuner.measure.replay import engine_replay, replay
from tuner.measure.window import measure_window
from tuner.traffic import rebase

POINT = ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "output_tok_s")
ORDER = ("base", "small-budget", "no-graphs", "few-seqs", "tiers", "block-32")  # most telling first
SPREAD_REPLAYS = 3
# every predicted step 3% shorter, then longer: how far a step-time error that small moves the simulated capacity
# (the edge where one request of the window misses its SLO can move far more than 3%)
SENSITIVITY = (0.97, 1.03)
CPU_REQUESTS = 20  # of a window on --cpu


def slo_for(cpu: bool) -> SloConfig:
    """The tuner's default SLO; on --cpu the quick start's (the tiny model meets 2 s at any rate)."""
    return SloConfig(ttft_s=0.3, tpot_s=0.02) if cpu else SloConfig()


def sim_capacity(config: EngineConfig, profile: GpuProfile, requests, slo: SloConfig) -> Measurement:
    clock = VirtualClock()
    engine = sim_engine(config, profile, clock)
    plan = MeasurePlan(ObjectiveName.capacity, slo, repeats=1, tol=0.02)
    return measure_window(engine_replay(engine, clock), requests, plan, quiet, lambda: 0.0)[0]


def sim_point(config: EngineConfig, profile: GpuProfile, requests, scale: float) -> dict[str, float]:
    """The simulated window at one rate scale, whole (no SLO stop): its latencies and throughput."""
    return run_sim(config, profile, rebase(requests, scale))[0]


def sim_passes(config: EngineConfig, profile: GpuProfile, requests, slo: SloConfig, scale: float) -> bool:
    """Whether the simulated window, whole at `scale`, meets the SLO's attainment (a probe's verdict)."""
    clock = VirtualClock()
    result = replay(sim_engine(config, profile, clock), clock, rebase(requests, scale))
    return summarize(result, slo, 0.0)["slo_attainment"] >= slo.attainment


def first_failure(config: EngineConfig, profile: GpuProfile, requests, slo: SloConfig, top: float) -> float:
    """The simulated capacity from below: scales from `top` / 2 up in 1% steps, the last one before the first
    that fails (0.0 when `top` / 2 fails). Where passing is not monotone in the rate (one short request of a
    small window meets its TPOT bound at some rates and not at others), a bisection finds whichever edge its
    path leads to; this finds the lowest."""
    if top <= 0:  # nothing passed: no scale to count up from
        return 0.0
    scale, last = top / 2, 0.0
    while scale <= top * 1.2 and sim_passes(config, profile, requests, slo, scale):
        last, scale = scale, scale * 1.01
    return last


def quiet(*_: object) -> None:
    pass
