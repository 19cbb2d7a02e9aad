"""`executor=sim`: trials on the simulator, in-process (no worker, no weights, no torch).

Each trial builds the runtime's own engine on a model-free backend (`runtime.sim_engine`): the real
scheduler and KV manager, a virtual clock that advances by the GPU profile's predicted step time, a KV
pool sized from the profiled GPU's memory. The replay and the measurement are the real executor's own
(`tuner.measure.replay`, `tuner.measure.measure`), so a simulated trial is measured exactly as a real one.
A replay on the virtual clock is deterministic, so each probe is one replay (a repeat could only agree).
What a simulation cannot do: the quality guardrail (numerics need a model) is skipped, and a trial runs
to its end (there is no process to time out) unless a signal stops it: the replay polls `tuner.interrupts`
before every step and raises `Interrupted`, as the worker's supervisor does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Sequence
from pathlib import Path

from runtime import (
    SIM_UNMODELLED,
    ConfigError,
    EngineConfig,
    load_profile,
    sim_memory,
)
from tuner.deployment import deployment_label, sim_deployment
from tuner.executors.base import OnCheckpoint, OnProgress
from tuner.executors.parallel import probe_fan
from tuner.interrupts import Interrupted, Interrupts
from tuner.measure.job import Hardware, TrialJob, TrialOutcome, TrialStatus
from tuner.measure.measure import ONE_AT_A_TIME, Fan
from tuner.measure.outcome import describe_failure, measured_outcome
from tuner.measure.replay import engine_replay
from tuner.measure.window import measure_window
from tuner.traffic import TrafficRequest

GIB = 1 << 30
FAN_MIN_REQUESTS = 1000  # a window's replay worth a process beside it (a fork costs tens of ms, a replay of
# 1,000 requests about a second on the CPU)


class SimExecutor:
    """The `Executor` protocol over a GPU profile."""

    side_by_side = True  # a measurement is CPU work on a virtual clock: measurements and probes may run at once

    def __init__(self, profile_path: Path, interrupts: Interrupts | None = None, devices: int = 1) -> None:
        self.interrupts = interrupts or Interrupts()  # polled before every simulated step
        self.devices = devices  # GPUs of the deployment: a trial's replicas fill them (tuner.deployment)
        self.path = Path(profile_path)
        self.profile = load_profile(self.path)
        self.sha256 = hashlib.sha256(self.path.read_bytes()).hexdigest()

    @property
    def label(self) -> str:
        """What every simulated figure says it is: `simulated (profile: PATH, MODEL on GPU (versions))`."""
        return f"simulated (profile: {self.path}, {self.profile.label}{deployment_label(self.devices, self.profile)})"

    def describe(self, config: EngineConfig) -> Hardware:
        d = self.profile.device
        versions = ", ".join(f"{k} {v}" for k, v in (("torch", d.torch), ("triton", d.triton), ("CUDA", d.cuda),
                                                      ("driver", d.driver)) if v)
        summary = f"{self.devices} x {d.name} (simulated: {self.path.name})"
        return Hardware(d.type, d.name, d.memory_bytes / GIB, summary, f"profiled with {versions}", SIM_UNMODELLED)

    def run(self, job: TrialJob, requests: Sequence[TrafficRequest], on_progress: OnProgress,
            on_checkpoint: OnCheckpoint, timeout_s: float) -> TrialOutcome:
        start = time.perf_counter()
        job = dataclasses.replace(job, plan=dataclasses.replace(job.plan, repeats=1, warmup_requests=0))
        try:
            planned = sim_memory(job.config, self.profile)[2].budget_bytes / GIB
            engine, clock = sim_deployment(job.config, self.profile, None, self.devices)
            setup_s = time.perf_counter() - start
            measurement, stopped_at = measure_window(engine_replay(engine, clock, self.interrupts.check), requests,
                                                     job.plan, on_progress, lambda: planned, on_checkpoint,
                                                     self._fan(len(requests)))
            return measured_outcome(measurement, stopped_at, None, setup_s, True)
        except Interrupted:  # a signal: the study decides (the running trial is re-queued, the conclusion kept)
            raise
        except ConfigError as e:  # too little memory on the profiled GPU, a profile of another model
            return TrialOutcome(TrialStatus.infeasible, reason=str(e), setup_s=time.perf_counter() - start)
        except Exception as e:  # as the worker: a trial never takes the study down
            return TrialOutcome(TrialStatus.error, reason=describe_failure(e))

    def _fan(self, requests: int) -> Fan:
        """Probes side by side on a window worth it (`FAN_MIN_REQUESTS`), else one at a time."""
        return probe_fan(self.interrupts.check) if requests >= FAN_MIN_REQUESTS else ONE_AT_A_TIME

    def close(self) -> None:
        pass
