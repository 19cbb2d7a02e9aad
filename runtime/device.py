"""The device an engine runs on, described for provenance and planning; its peak memory per run."""

from __future__ import annotations

import os
import platform
import resource
from importlib import metadata
from typing import NamedTuple

import torch

from runtime.config import EngineConfig
from runtime.memory import GIB
from runtime.placement import resolve_device

__all__ = ["DeviceInfo", "describe_device", "peak_memory_gb", "reset_peak_memory"]


class DeviceInfo(NamedTuple):
    type: str  # cuda | cpu
    name: str  # "NVIDIA H200", or the CPU architecture and cores
    memory_gb: float | None  # the GPU's total memory; None on CPU (planned from cache.device_memory_gb)
    torch_version: str
    triton_version: str | None  # None when Triton is not installed
    driver: str | None  # the CUDA runtime torch was built with

    @property
    def hardware(self) -> str:
        """`N x GPU name`, or the CPU: the line provenance records."""
        if self.type == "cuda":
            return f"{torch.cuda.device_count()} x {self.name}"
        return self.name


def describe_device(config: EngineConfig) -> DeviceInfo:
    """What `config.device` resolves to here."""
    device = resolve_device(config.device)
    try:
        triton = metadata.version("triton")
    except metadata.PackageNotFoundError:
        triton = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return DeviceInfo("cuda", props.name, props.total_memory / GIB, torch.__version__, triton, torch.version.cuda)
    return DeviceInfo("cpu", f"CPU {platform.machine()} x {os.cpu_count()} cores", None, torch.__version__, triton,
                      None)


def reset_peak_memory(config: EngineConfig) -> None:
    if resolve_device(config.device).type == "cuda":
        torch.cuda.reset_peak_memory_stats()


def peak_memory_gb(config: EngineConfig) -> float:
    """CUDA: peak allocated since `reset_peak_memory`. CPU: the process's peak resident set (kB on Linux)."""
    if resolve_device(config.device).type == "cuda":
        return torch.cuda.max_memory_allocated() / GIB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB
