"""Factories for simulator tests: a GPU profile of the tiny model with chosen step-time coefficients.

The profile's memory figures are the tiny model's on CPU in fp32 (its weights' bytes, the CPU activation
estimate as a line), so a simulated engine and a real CPU engine of one config plan the same KV pool.
"""

from __future__ import annotations

from pathlib import Path

from runtime.model.info import model_info
from runtime.sim import GpuProfile, save_profile
from runtime.sim.profile_file import ActivationFit, DeviceRecord

TINY_WEIGHT_BYTES = 4_461_056  # the tiny preset's parameters in fp32
# 4 ms a step, 20 us a prefill token, 1 ns per token x context, 50 us a decode row, 20 ns per decode context token
COEFFICIENTS = (4e-3, 2e-5, 1e-9, 5e-5, 2e-8)


def tiny_profile(coefficients: dict[str, tuple[float, ...]] | None = None, memory_gb: float = 1.0,
                 device_type: str = "cuda") -> GpuProfile:
    return GpuProfile(
        model="tiny", model_shape=model_info("tiny")._asdict(), dtype="float32",
        device=DeviceRecord("Test GPU", device_type, int(memory_gb * (1 << 30)), "2.13.0"),
        weight_bytes=TINY_WEIGHT_BYTES,
        # runtime.memory.estimate_activation_bytes for tiny in fp32: (6 x 128 + 3 x 256) x 4 per token,
        # 3 x 2048 x 4 per sampled row
        activation=ActivationFit(0.0, 6144.0, 24576.0),
        coefficients=coefficients or {"bs16/auto/eager": COEFFICIENTS},
        held_back_error=(0.0, 0.0, 0.0, 0.0), created="2026-11-30T00:00:00+00:00", command="tests")


def write_tiny_profile(folder: Path, **kwargs) -> Path:
    return save_profile(tiny_profile(**kwargs), folder / "tiny-profile.json")
