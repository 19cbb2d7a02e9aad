"""A GPU profile: one model measured on one GPU, as `python -m runtime.profile` writes it (JSON, no torch).

It holds what the simulator needs to stand in for that GPU: the device's memory, the weights' bytes and
the forward's peak activations (so the KV pool is sized as the real engine would size it there), the
step-time coefficients per variant, a step's host time (`runtime.sim.hostmodel`), the timed steps they
were fitted on (kept, so a refit can add the real trials' steps) and the fit's error on held-back
steps. Versions (driver, CUDA, torch, Triton) are provenance: every simulated figure names its profile.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from runtime.config import ConfigError
from runtime.model.info import ModelInfo
from runtime.sim.hostmodel import HostModel
from runtime.sim.parallel import AllReduceCost, estimate
from runtime.sim.stepmodel import FitError, StepSample, StepShape, StepTimeModel, Variant
from runtime.typed import build

FORMAT = 1


@dataclass(frozen=True)
class DeviceRecord:
    name: str  # "NVIDIA H200", or "CPU x86_64 x 2 cores" for a test profile
    type: str  # cuda | cpu
    memory_bytes: int  # total device memory (what gpu_memory_utilization multiplies)
    torch: str
    triton: str | None = None
    cuda: str | None = None  # the CUDA runtime torch was built with
    driver: str | None = None  # the NVIDIA driver, from nvidia-smi


@dataclass(frozen=True)
class ActivationFit:
    """Peak activation bytes of the profile forward: const + per_token x tokens + per_seq x sampled rows."""

    const_bytes: float
    per_token_bytes: float
    per_seq_bytes: float
    measured: tuple[tuple[int, int, int], ...] = ()  # (tokens, seqs, peak bytes) the fit came from

    def bytes_for(self, num_tokens: int, num_seqs: int) -> int:
        return int(self.const_bytes + self.per_token_bytes * num_tokens + self.per_seq_bytes * num_seqs)


@dataclass(frozen=True)
class GpuProfile:
    model: str  # the model name as profiled (a preset, a folder)
    model_shape: dict[str, Any]  # runtime.model.info.ModelInfo's fields: the shape without the model at hand
    dtype: str  # the weights' dtype the steps ran in
    device: DeviceRecord
    weight_bytes: int
    activation: ActivationFit
    coefficients: dict[str, tuple[float, ...]]  # Variant.key -> step-time coefficients (stepmodel.FEATURES)
    held_back_error: tuple[float, ...]  # stepmodel.FitError: points, median, p90, max
    samples: dict[str, tuple[tuple[float, ...], ...]] = field(default_factory=dict)  # Variant.key ->
    #                                  rows of (prefill_tokens, prefill_attention, decode_seqs, decode_context, s)
    grid: str = "full"  # small | full: how many step compositions were timed
    measure_s: float = 0.0  # how long the profile took
    created: str = ""  # ISO date and time
    command: str = ""  # the command that wrote it
    notes: tuple[str, ...] = ()  # variants skipped or cut by the time budget, and why
    host: tuple[float, float] = (0.0, 0.0)  # hostmodel.HostModel: a step's host time beyond the model's
    #                                        (0, 0 until a refit measures it on the real engine)
    tier_s: float = 0.0  # stepmodel.StepTimeModel.tier_s: a step's cost per tier past the first
    # tensor-parallel degree -> (latency_s, s_per_byte) of one all-reduce, measured on this device; a degree not
    # here is simulated with the unmeasured estimate (runtime.sim.parallel.estimate), and says so
    allreduce: dict[str, tuple[float, float]] = field(default_factory=dict)
    format: int = FORMAT

    def __post_init__(self) -> None:
        if self.format != FORMAT:
            raise ConfigError(f"format: this runtime reads GPU profile format {FORMAT}, got {self.format}")
        StepTimeModel(self.coefficients, self.tier_s)  # validates the keys, the lengths and tier_s

    @property
    def info(self) -> ModelInfo:
        return ModelInfo(**self.model_shape)

    @property
    def step_model(self) -> StepTimeModel:
        return StepTimeModel(self.coefficients, self.tier_s)

    def allreduce_cost(self, degree: int) -> AllReduceCost:
        """One all-reduce at `degree`: measured into this profile, or the documented estimate (unmeasured)."""
        measured = self.allreduce.get(str(degree))
        return estimate(degree) if measured is None else AllReduceCost(*measured, measured=True)

    @property
    def host_model(self) -> HostModel:
        return HostModel(*self.host)

    @property
    def fit_error(self) -> FitError:
        points, median, p90, worst = self.held_back_error
        return FitError(int(points), median, p90, worst)

    @property
    def step_samples(self) -> list[StepSample]:
        return [StepSample(Variant.parse(key), StepShape(*(int(v) for v in row[:4])), row[4])
                for key, rows in self.samples.items() for row in rows]

    def scaled(self, factor: float) -> GpuProfile:
        """This profile with every step predicted `factor` times as long (floors too; the host model as it is):
        how far a step-time error of that size moves a simulated figure."""
        if not factor > 0:
            raise ValueError(f"a step-time scale must be positive, got {factor}")
        return replace(self, coefficients={k: tuple(c * factor for c in v) for k, v in self.coefficients.items()},
                       tier_s=self.tier_s * factor)

    @property
    def label(self) -> str:
        """One line for provenance: `llama-3-8b on NVIDIA H200 (torch 2.13.0, ...)`."""
        versions = ", ".join(f"{k} {v}" for k, v in (("torch", self.device.torch), ("triton", self.device.triton),
                                                      ("CUDA", self.device.cuda), ("driver", self.device.driver))
                             if v)
        return f"{self.model} on {self.device.name} ({versions})"


def samples_table(samples: list[StepSample]) -> dict[str, tuple[tuple[float, ...], ...]]:
    """StepSamples as the profile stores them."""
    table: dict[str, list[tuple[float, ...]]] = {}
    for s in samples:
        table.setdefault(s.variant.key, []).append((*map(float, s.shape), s.seconds))
    return {k: tuple(v) for k, v in table.items()}


def load_profile(path: str | Path) -> GpuProfile:
    """Read and validate a profile; a ConfigError names the file and the key."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: cannot read the GPU profile ({e})") from None
    try:
        profile = build(GpuProfile, data, ConfigError)
        ModelInfo(**profile.model_shape)
        return profile
    except (ConfigError, TypeError, ValueError) as e:
        raise ConfigError(f"{path}: {e}") from None


def save_profile(profile: GpuProfile, path: str | Path) -> Path:
    """Write atomically (a temp file, then rename) and read it back."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(asdict(profile), indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    load_profile(path)
    return path
