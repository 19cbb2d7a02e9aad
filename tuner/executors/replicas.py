"""`ReplicasExecutor`: real trials of a deployment over `devices` > 1 (executor real): each trial's config served
by devices / tensor_parallel_size replicas, one `python -m runtime.serve` each, measured over HTTP as one
deployment behind the replay's least-outstanding-requests dispatcher (the simulated balancer's rule), stopped.

    devices 4, TP 2     replica 1: CUDA_VISIBLE_DEVICES=0,1      replica 2: CUDA_VISIBLE_DEVICES=2,3
    devices 4, TP 4     replica 1: CUDA_VISIBLE_DEVICES=0,1,2,3  (one server; its ranks on the four)

    run   the trial's config as a runtime YAML (what `--config best.yaml` reads) -> `ServerSet.run`: the replicas
          started at once (until the last is ready: the trial's setup_s, its overhead), measured, stopped; a
          replica that cannot start, or dies, fails the trial with its own last log lines, and the study goes on

Every shape of the study, one replica included, is measured so (the same HTTP path for each), while `devices` 1
keeps the in-process worker. On a GPU host each replica gets its slice of the devices (of the parent's
CUDA_VISIBLE_DEVICES when set, else 0..N-1); on a CPU the replicas are plain processes side by side. Torch-free:
the device is described once by a worker started for it.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

from runtime import EngineConfig
from tuner.config import TunerConfigError
from tuner.deployment import shape_of
from tuner.executors.base import OnCheckpoint, OnProgress
from tuner.executors.server_process import ServerProcess
from tuner.executors.servers import ServerSet, trial_name
from tuner.interrupts import Interrupts
from tuner.measure.job import Hardware, TrialJob, TrialOutcome, TrialStatus
from tuner.traffic import TrafficRequest

__all__ = ["SERVE", "ReplicasExecutor", "device_slices"]

SERVE = (sys.executable, "-m", "runtime.serve")
STOP_GRACE_S = 10.0


def device_slices(devices: int, degree: int, visible: str | None) -> list[str]:
    """Each replica's CUDA_VISIBLE_DEVICES: consecutive `degree` devices of `visible` (the parent's list), or of
    0..devices-1. Raises TunerConfigError when `visible` lists fewer than `devices`."""
    ids = [d.strip() for d in visible.split(",") if d.strip()] if visible else [str(i) for i in range(devices)]
    if len(ids) < devices:
        raise TunerConfigError(f"devices: {devices}, but CUDA_VISIBLE_DEVICES lists {len(ids)} ({visible})")
    return [",".join(ids[i:i + degree]) for i in range(0, devices, degree)]


class ReplicasExecutor:
    def __init__(self, devices: int, hardware: Hardware, interrupts: Interrupts | None = None,
                 work_dir: Path | None = None, command: Sequence[str] = SERVE,
                 env: Mapping[str, str] | None = None) -> None:
        """`hardware`: the device, as a worker described it (fewer GPUs than `devices`: TunerConfigError);
        `command`: the server's argv before `--config` (anything serving the OpenAI API with these flags stands in)."""
        self.devices, self.hardware, self.command = devices, hardware, list(command)
        self.env = dict(os.environ if env is None else env)
        if hardware.device_type == "cuda" and hardware.gpus < devices:  # a replica would fall back to the CPU
            raise TunerConfigError(f"devices: {devices} GPUs, but this machine shows {hardware.gpus} "
                                   f"({hardware.summary})")
        self.work_dir = work_dir or Path(tempfile.mkdtemp(prefix="pagetune-replicas-"))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.interrupts = interrupts or Interrupts()
        self._servers: ServerSet | None = None  # the trial's replicas, while it runs
        self._starts = 0  # names each trial's config file and logs, in order

    def describe(self, config: EngineConfig) -> Hardware:
        return self.hardware

    def run(self, job: TrialJob, requests: Sequence[TrafficRequest], on_progress: OnProgress,
            on_checkpoint: OnCheckpoint, timeout_s: float) -> TrialOutcome:
        """Start the job's replicas, measure the deployment, stop them; never raises for what a replica does."""
        if job.quality is not None:
            return TrialOutcome(TrialStatus.error, reason="numerics knobs (qk_clip, kv_cache_dtype, ...) change the "
                                "output and the quality guardrail does not run on replicas yet: freeze them with "
                                f"devices {self.devices}")
        self._starts += 1
        name = trial_name(self._starts, job)
        config_file = self.work_dir / f"{name}.yaml"
        config_file.write_text(yaml.safe_dump({**job.config.to_dict(), "metadata": None}, sort_keys=False))
        servers = self._replicas(job.config, timeout_s)
        logs = [self.work_dir / f"{name}-replica-{i + 1}.log" for i in range(len(servers))]
        self._servers = ServerSet(servers)
        try:
            return self._servers.run(config_file, logs, job, requests, on_progress, on_checkpoint, timeout_s,
                                     self.interrupts)
        finally:
            self._servers = None

    def _replicas(self, config: EngineConfig, timeout_s: float) -> list[ServerProcess]:
        shape = shape_of(config, self.devices)
        slices = (device_slices(self.devices, shape.tensor_parallel_size, self.env.get("CUDA_VISIBLE_DEVICES"))
                  if self.hardware.device_type == "cuda" else [None] * shape.replicas)
        servers = []
        for i, devices in enumerate(slices):
            env = self.env if devices is None else {**self.env, "CUDA_VISIBLE_DEVICES": devices}
            name = f"replica {i + 1} of {shape.replicas}" + ("" if devices is None else f" (GPUs {devices})")
            servers.append(ServerProcess(self.command, env, timeout_s, STOP_GRACE_S, name, "tuner.trial_timeout_s"))
        return servers

    def close(self) -> None:
        if self._servers is not None:
            self._servers.stop()
            self._servers = None
