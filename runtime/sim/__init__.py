"""The simulator: the runtime's own scheduler and KV manager on a virtual clock driven by a step-time model
profiled on a GPU (`python -m runtime.profile`). No torch: the tuner's parent process runs it in-process.

    stepmodel.py     StepShape, Variant, StepTimeModel, fit, fit_error: the step-time model and its fit
    shape.py         StepShaper: a scheduled step -> (variant, shape) per tier, padding and graphs as the runner
    profile_file.py  GpuProfile: what a profile records; load_profile / save_profile (JSON)
    engine.py        sim_engine: LLMEngine on a model-free backend; VirtualClock, SimRunner, StreamSampler
    hostmodel.py     HostModel, fit_host: a step's host time (scheduling, outputs, the replay loop) per sequence
    refit.py         refit_profile: a profile refitted with a real engine's timed steps, errors before and after
"""

from __future__ import annotations

from runtime.sim.engine import VirtualClock, sim_engine, sim_memory
from runtime.sim.hostmodel import HostModel, fit_host
from runtime.sim.profile_file import GpuProfile, load_profile, save_profile
from runtime.sim.refit import Refit, StepRow, refit_profile
from runtime.sim.shape import StepShaper
from runtime.sim.stepmodel import UNMODELLED, FitError, StepSample, StepShape, StepTimeModel, Variant, fit, fit_error

__all__ = ["UNMODELLED", "FitError", "GpuProfile", "HostModel", "Refit", "StepRow", "StepSample", "StepShape",
           "StepShaper", "StepTimeModel", "Variant", "VirtualClock", "fit", "fit_error", "fit_host", "load_profile",
           "refit_profile", "save_profile", "sim_engine", "sim_memory"]
