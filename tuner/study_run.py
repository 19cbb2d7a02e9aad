"""The edge of a study: the validated config turned, once, into the objects the study runs on (`StudyRun`).
Every phase after it (`tuner.app`: the search, the conclusion, the report) takes these and the config sections
they read, never the whole config.

    open_executors (executor.*, the device)  ->  study_inputs (traffic, windows, rates)  ->  the device described
    ->  SearchSpace (search.*, knobs inert there left out)  ->  baseline  ->  the study's identity (fingerprint)
"""

from __future__ import annotations

from dataclasses import dataclass

from runtime import EngineConfig
from tuner.config import (
    AppConfig,
    BaselineName,
    Measuring,
    QualityConfig,
    StorageConfig,
    TrackingConfig,
    ValidationConfig,
)
from tuner.console import Console
from tuner.executors.selection import Executors, open_executors
from tuner.inputs import StudyInputs, grouped_arrivals, study_inputs
from tuner.interrupts import Interrupts
from tuner.measure.job import Hardware
from tuner.search.baseline import baseline_config
from tuner.search.identity import StudyIdentity, study_identity
from tuner.search.space import SearchSpace

__all__ = ["StudyRun", "open_study_run"]


@dataclass(frozen=True)
class StudyRun:
    """What a study runs on, built once (`open_study_run`)."""

    measuring: Measuring  # tuner.*, slo, replay.min_window_s
    runtime: EngineConfig  # what every trial's config starts from (simulating: the profile's model)
    baseline_name: BaselineName  # baseline=: where the baseline's values come from
    quality: QualityConfig
    validation: ValidationConfig
    storage: StorageConfig
    tracking: TrackingConfig
    executors: Executors  # what runs the trials and the re-measurements
    inputs: StudyInputs  # the traffic, its windows and their rates
    hardware: Hardware  # the device the trials run on, as the executor describes it
    space: SearchSpace
    baseline: EngineConfig  # what the baseline trial runs
    identity: StudyIdentity  # the study's name and fingerprint
    devices: int = 1  # GPUs of the deployment (`devices`): a capacity is the whole deployment's

    @property
    def simulated(self) -> bool:
        """The verdict's figures are simulated (the re-measurements ran on the simulator)."""
        return self.executors.sim is not None and self.executors.measure is self.executors.sim


def open_study_run(app: AppConfig, console: Console, interrupts: Interrupts | None = None) -> StudyRun:
    """The study's objects, what it runs on said on the console as each is known. Raises TunerConfigError,
    ConfigError, TrafficError and WorkerStartError; the executors are closed when it raises."""
    executors, app = open_executors(app, interrupts)
    try:
        inputs = study_inputs(app)
        console.line(f"traffic: {inputs.traffic.summary()}")
        if arrivals := grouped_arrivals(inputs.search):  # said before the search: it can leave no rate meeting the SLO
            console.line(f"arrivals: {arrivals}")
        console.lines(list(executors.notes))
        hardware = executors.search.describe(app.runtime)
        inert = app.runtime.inert_fields(hardware.device_type) | hardware.unmodelled
        space = SearchSpace.from_config(app.search, inert)
        baseline, source = baseline_config(app, hardware, space)
        identity = study_identity(app, inputs.traffic.sha256, executors.sim.sha256 if executors.sim else None,
                                  executors.identity)
    except BaseException:
        executors.close()
        raise
    console.line(f"device: {hardware.summary} ({hardware.versions}); baseline: {source}")
    if space.inert:
        where = "in simulation" if hardware.unmodelled else f"on {hardware.device_type}"
        console.line(f"not searched, no effect {where}: {', '.join(space.inert)}")
    return StudyRun(app.measuring, app.runtime, app.baseline, app.quality, app.validation, app.storage, app.tracking,
                    executors, inputs, hardware, space, baseline, identity, app.devices)
