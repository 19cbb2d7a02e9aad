"""`VllmExecutor`: each trial's config on vLLM itself, `vllm serve --config FILE`, measured over HTTP.

    open      the probe (vLLM's Python runs tuner/executors/vllm_probe.py): its version, device and argument
              list; without vLLM, a one-line refusal saying how to install it
    check     every knob's vLLM option and value, and executor.vllm.args, against that argument list
              (before the first trial; one line naming the key and the version)
    run       the trial's file (tuner.vllm.trial_file: the vllm.yaml writer, or only the model for vLLM's
              defaults) -> `ServerSet.run` on one `vllm serve`: started (its seconds are the trial's setup_s, the
              overhead), HttpExecutor's measurement (the same as replay.target's), stopped; a server that cannot
              start, or that died while measured, fails the trial with its own last log lines
    close     stops a server a signal left running

Every start shares VLLM_CACHE_ROOT (executor.vllm.cache_dir), so compiled graphs and kernels built by one
trial serve the next. Torch-free and vLLM-free in this process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import yaml
from optuna.distributions import CategoricalDistribution

from runtime import EngineConfig
from tuner.config import TunerConfigError, VllmExecutorConfig
from tuner.executors.base import OnCheckpoint, OnProgress
from tuner.executors.server_process import ServerProcess
from tuner.executors.servers import ServerSet, trial_name
from tuner.executors.vllm_probe import NO_VLLM
from tuner.interrupts import Interrupts
from tuner.measure.job import Hardware, TrialJob, TrialOutcome, TrialStatus
from tuner.search.space import KnobMode, SearchSpace
from tuner.traffic import TrafficRequest
from tuner.vllm import option_names, trial_file
from tuner.vllm_args import PINNED_VERSION, VllmArgList

__all__ = ["VllmExecutor", "VllmProbe", "probe_vllm"]

PROBE_TIMEOUT_S = 600.0  # importing vLLM (and torch) on a cold host
INSTALL = (f"pip install 'pagetune[vllm]' (vLLM {PINNED_VERSION}), or point executor.vllm.probe and "
           "executor.vllm.command at an environment that has it")


class VllmProbe(NamedTuple):
    version: str
    device: dict[str, Any]  # {"type": cuda | cpu, "name": ..., "memory_gb": float | None}
    args: VllmArgList


def probe_vllm(cfg: VllmExecutorConfig) -> VllmProbe:
    """Ask vLLM's Python what it is. Raises TunerConfigError (one line) when vLLM is missing or the probe fails."""
    argv = list(cfg.probe or [sys.executable, str(Path(__file__).with_name("vllm_probe.py"))])
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise TunerConfigError(f"executor.vllm.probe: {' '.join(argv)}: {type(e).__name__}: {e}") from None
    if done.returncode == NO_VLLM:
        raise TunerConfigError(f"executor=vllm: vLLM is not installed for {argv[0]}: {INSTALL}")
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise TunerConfigError(f"executor.vllm.probe: {' '.join(argv)} exited with code {done.returncode}: {last}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise TunerConfigError(f"executor.vllm.probe: {' '.join(argv)} printed no JSON line")
    data = json.loads(lines[-1])
    return VllmProbe(data["version"], data["device"], VllmArgList.from_mapping(data["version"], data["args"]))


class VllmExecutor:
    def __init__(self, cfg: VllmExecutorConfig, model: str, probe: VllmProbe | None = None,
                 interrupts: Interrupts | None = None) -> None:
        self.cfg, self.model = cfg, model
        self.probe = probe or probe_vllm(cfg)
        if shutil.which(cfg.command[0]) is None:
            raise TunerConfigError(f"executor.vllm.command: {cfg.command[0]!r} is not a program on PATH: {INSTALL}")
        self.work_dir = Path(cfg.work_dir or tempfile.mkdtemp(prefix="pagetune-vllm-"))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        cache = cfg.cache_dir or Path.home() / ".cache" / "pagetune" / "vllm"
        self.env = {**os.environ, "VLLM_CACHE_ROOT": str(cache), "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
        self._servers: ServerSet | None = None  # the trial's server, while it runs
        self._starts = 0  # names each start's config file and log, in order
        self.interrupts = interrupts or Interrupts()  # a signal stops the server at once; the trial is re-queued

    @property
    def label(self) -> str:
        return f"vLLM {self.probe.version}"

    def check(self, space: SearchSpace) -> None:
        """Every knob's vLLM option and each value it may take, and executor.vllm.args, are vLLM's own.
        Raises VllmArgError naming the key and the version."""
        for key, value in self.cfg.args.items():
            self.probe.args.check(key, value, f"executor.vllm.args.{key}")
        for knob in space.knobs:
            if knob.mode is KnobMode.KEPT:
                continue
            values = [knob.fixed] if knob.mode is KnobMode.FIXED else _sample_values(knob.distribution)
            for dest in option_names(knob.path):
                for value in values:
                    value = (not value) if dest == "enforce_eager" and isinstance(value, bool) else value
                    self.probe.args.check(dest, value, f"search.params.{knob.name} ({knob.path})")

    def describe(self, config: EngineConfig) -> Hardware:
        d = self.probe.device
        return Hardware(d["type"], d["name"], d["memory_gb"], f"1 x {d['name']}", f"{self.label}, vllm serve")

    def run(self, job: TrialJob, requests: Sequence[TrafficRequest], on_progress: OnProgress,
            on_checkpoint: OnCheckpoint, timeout_s: float) -> TrialOutcome:
        """Start vLLM on the job's config, measure it, stop it; never raises for what vLLM does."""
        if job.quality is not None:
            return TrialOutcome(TrialStatus.error, reason="numerics knobs (kv_cache_dtype) change the output and the "
                                "quality guardrail does not run on vLLM yet: freeze them with executor=vllm")
        self._starts += 1
        name = trial_name(self._starts, job)
        config_file = self.work_dir / f"{name}.yaml"
        written = trial_file(job.config, model=self.model, deploy=self.cfg.args, only_args=self.cfg.only_args)
        config_file.write_text(yaml.safe_dump(written, sort_keys=False))
        server = ServerProcess([*self.cfg.command, "serve"], self.env, min(self.cfg.start_timeout_s, timeout_s),
                               self.cfg.stop_grace_s, "vllm serve", "executor.vllm.start_timeout_s")
        self._servers = ServerSet([server])
        try:
            return self._servers.run(config_file, [self.work_dir / f"{name}.log"], job, requests, on_progress,
                                     on_checkpoint, timeout_s, self.interrupts)
        finally:
            self._servers = None

    def close(self) -> None:
        if self._servers is not None:
            self._servers.stop()
            self._servers = None


def _sample_values(distribution: Any) -> list[Any]:
    """The values a searched knob may take that a type check can tell apart: every choice, or one bound."""
    if isinstance(distribution, CategoricalDistribution):
        return list(distribution.choices)
    return [distribution.low if isinstance(distribution.low, int) else float(distribution.low)]
