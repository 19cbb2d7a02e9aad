"""Which executor runs the trials and which re-measures the finalists, from `executor.*` and `tuner.fidelity`.

    executor   fidelity   trials                      finalists and baseline
    real       single     worker (real runtime)       worker
    sim        single     SimExecutor (the profile)    SimExecutor
    sim        sim+real   SimExecutor                  worker: measured for real, beside the simulated figures
    auto       either     real on a GPU; without one, sim on executor.profile (default DEFAULT_PROFILE) when it
                          exists, else real
    vllm       single     VllmExecutor (vllm serve)   VllmExecutor: vLLM's own figures throughout

With `devices` > 1 the search picks the deployment's shape too (`tuner.deployment`): simulated, or on the real
runtime as servers, one per replica (`ReplicasExecutor`; sim+real is refused: the refit needs timed steps).

Simulating, the runtime's model is the profile's (the step times are that model's on that GPU); the
console says so when it replaces the configured one.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

from runtime import model_info
from tuner.config import AppConfig, TunerConfigError
from tuner.deployment import deployment_notes, shapes_line, with_shape_knob
from tuner.executors.base import Executor
from tuner.executors.replicas import ReplicasExecutor
from tuner.executors.sim import SimExecutor
from tuner.executors.supervisor import WorkerSupervisor
from tuner.executors.vllm import VllmExecutor
from tuner.interrupts import Interrupts
from tuner.search.space import SearchSpace


class Executors(NamedTuple):
    search: Executor  # runs the trials
    measure: Executor  # re-measures the finalists and the baseline (the search's unless sim+real)
    sim: SimExecutor | None  # set when the trials are simulated
    notes: tuple[str, ...]  # console lines: what runs, and why
    interrupts: Interrupts | None = None  # SIGINT/SIGTERM: the search stops cleanly between or within trials
    engine: str = "the real runtime"  # what the measured figures were measured on ("vLLM 0.26.0": executor=vllm)
    identity: dict | None = None  # executor=vllm: vLLM's version, model and args, part of the study's fingerprint

    @property
    def figures(self) -> str:
        """What the study's figures are, as the console, report, best.yaml and MLflow say it."""
        if self.sim is None:
            return f"measured on {self.engine}"
        if self.measure is self.sim:
            return self.sim.label
        return f"trials {self.sim.label}; the finalists, the baseline and the verdict measured on the real runtime"

    def close(self) -> None:
        self.search.close()
        if self.measure is not self.search:
            self.measure.close()


def open_executors(app: AppConfig, interrupts: Interrupts | None = None) -> tuple[Executors, AppConfig]:
    """The executors for `app`, and the config the study runs with on them (simulating: the profile's model,
    and the deployment's shape searched); auto starts the worker to learn whether this machine has a GPU.
    Raises TunerConfigError (a missing or bad profile, sim+real without a simulator) and WorkerStartError."""
    kind, notes = app.executor.kind, []
    worker = None
    if kind == "vllm":
        return _vllm(app, interrupts)
    engine_args = [name for name, p in app.search.params.items() if p.path.startswith("vllm.")]
    if engine_args:
        raise TunerConfigError(f"search.params.{engine_args[0]}: a vllm.* knob is a vLLM engine argument, which only "
                               "executor=vllm applies (search=vllm goes with executor=vllm)")
    if kind == "auto":
        worker = _worker(app, interrupts)
        profile = app.executor.profile_path
        if worker.describe(app.runtime).device_type == "cuda":
            kind = "real"
        elif profile.is_file():
            notes.append(f"executor: sim (no GPU here: {profile} is simulated; executor=real runs the runtime on "
                         "this CPU)")
            kind = "sim"
        else:
            notes.append(f"executor: real (no GPU here, and no GPU profile at {profile} to simulate)")
            kind = "real"
    try:
        if kind == "sim":
            return _simulated(app, worker, notes, interrupts)
        if app.tuner.fidelity == "sim+real":
            raise TunerConfigError("tuner.fidelity: sim+real searches in simulation: set executor=sim "
                                   "(and executor.profile=PATH)")
    except BaseException:
        if worker is not None:  # the worker `auto` started to look at the device
            worker.close()
        raise
    worker = worker or _worker(app, interrupts)
    if app.devices > 1:
        return _replicas(app, worker, notes, interrupts)
    return Executors(worker, worker, None, tuple(notes), interrupts), app


def _replicas(app: AppConfig, worker: WorkerSupervisor, notes: list[str],
              interrupts: Interrupts | None) -> tuple[Executors, AppConfig]:
    """`devices` > 1 on the real runtime: the worker describes the device and goes; each trial's replicas are
    servers (`ReplicasExecutor`), and the shape is a knob over the model's heads."""
    try:
        hardware = worker.describe(app.runtime)
    finally:
        worker.close()
    replicas = ReplicasExecutor(app.devices, hardware, interrupts)
    if interrupts is not None:
        interrupts.on_force = replicas.close  # a second signal: the servers go too (each in a group of its own)
    info = model_info(app.runtime.model.name)
    app = dataclasses.replace(app, search=with_shape_knob(app.search, app.devices, info))
    notes += [shapes_line(app.devices, info),
              f"executor: real, {app.devices} devices: each trial's replicas are python -m runtime.serve servers, "
              f"measured over HTTP behind the least-outstanding-requests dispatcher (configs and logs in "
              f"{replicas.work_dir})"]
    return Executors(replicas, replicas, None, tuple(notes), interrupts), app


def _simulated(app: AppConfig, worker: WorkerSupervisor | None, notes: list[str],
               interrupts: Interrupts | None) -> tuple[Executors, AppConfig]:
    path = app.executor.profile_path
    if not path.is_file():
        raise TunerConfigError(
            f"executor.profile: no GPU profile at {path}. Make one on the GPU to simulate: "
            f"python -m runtime.profile model=llama-3-8b out={path}")
    try:
        sim = SimExecutor(path, interrupts=interrupts, devices=app.devices)
    except Exception as e:  # runtime.ConfigError: the file names its bad key
        raise TunerConfigError(f"executor.profile: {e}") from None
    if app.runtime.model.name != sim.profile.model:
        notes.append(f"simulating {sim.profile.model} (the profile's model) in place of runtime.model.name "
                     f"{app.runtime.model.name}")
        runtime = dataclasses.replace(app.runtime, model=dataclasses.replace(app.runtime.model,
                                                                             name=sim.profile.model))
        app = dataclasses.replace(app, runtime=runtime)
    app = dataclasses.replace(app, search=with_shape_knob(app.search, app.devices, sim.profile.info))
    notes.append(f"figures are {sim.label}; held-back fit error {sim.profile.fit_error.line()}")
    notes += deployment_notes(app.devices, sim.profile)
    if sim.profile.tier_s == 0 and _may_use_tiers(app):
        notes.append(f"{path} has no cost for a second block tier (tier_s 0): simulated configs with block tiers "
                     "pay nothing for it and look better than they are; python -m runtime.profile measures it now")
    if app.tuner.fidelity == "sim+real":
        if app.devices > 1:
            raise TunerConfigError(f"tuner.fidelity: sim+real refits the profile from timed engine steps, which a "
                                   f"deployment of {app.devices} devices (measured over HTTP) does not give: devices 1")
        worker = worker or _worker(app, interrupts)
        notes.append("tuner.fidelity=sim+real: the finalists and the baseline are measured on the real runtime")
        return Executors(sim, worker, sim, tuple(notes), interrupts), app
    if worker is not None:
        worker.close()
    return Executors(sim, sim, sim, tuple(notes), interrupts), app


def _vllm(app: AppConfig, interrupts: Interrupts | None) -> tuple[Executors, AppConfig]:
    """executor=vllm: vLLM probed, the knobs checked against its argument list, before any trial."""
    if app.tuner.fidelity == "sim+real":
        raise TunerConfigError("tuner.fidelity: sim+real searches in simulation: set executor=sim")
    model = app.executor.vllm.model or app.runtime.model.name
    vllm = VllmExecutor(app.executor.vllm, model, interrupts=interrupts)
    vllm.check(SearchSpace.from_config(app.search))
    if interrupts is not None:
        interrupts.on_force = vllm.close  # a second signal: the server goes too (it is in a group of its own)
    note = (f"executor: vllm ({vllm.label} on {vllm.probe.device['name']}, serving {model}; each trial's config "
            f"and server log in {vllm.work_dir})")
    identity = {"vllm": vllm.probe.version, "model": model, "args": dict(app.executor.vllm.args),
                "only_args": app.executor.vllm.only_args}
    return Executors(vllm, vllm, None, (note,), interrupts, vllm.label, identity), app


def _may_use_tiers(app: AppConfig) -> bool:
    """A trial may run over two block tiers: the runtime's config has them, or a searched knob sets them."""
    enabled = any(p.path == "tiers.enabled" and not p.frozen and (p.freeze is None or p.freeze is True)
                  for p in app.search.params.values())
    return bool(app.runtime.cache.block_tiers) or enabled


def _worker(app: AppConfig, interrupts: Interrupts | None) -> WorkerSupervisor:
    worker = WorkerSupervisor(app.tuner.worker_threads, app.tuner.worker_memory_gb, interrupts)
    if interrupts is not None:
        interrupts.on_force = worker.kill  # a second signal: the worker goes at once
    return worker
