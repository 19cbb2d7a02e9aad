"""The deployment's shape: `devices` GPUs as replicas of `tensor_parallel_size` GPUs each.

    devices: 4, a model with 32 query / 8 KV heads      shapes: TP 1 x 4 replicas, TP 2 x 2, TP 4 x 1

TP halves a step's work per GPU but adds two all-reduces a layer; replicas multiply the KV pool and the batch
slots. Which wins depends on the traffic, so with `devices` > 1 the degree is a knob of the search
(`tensor_parallel_size`, vLLM's name), its choices the degrees that divide both the devices and the model's
heads (`runtime.check_tensor_parallel`), and the replicas follow: devices / degree.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

from runtime import ConfigError, EngineConfig, ModelInfo, check_tensor_parallel
from tuner.config import ParamConfig, SearchConfig

__all__ = ["SHAPE_KNOB", "Shape", "deployment_line", "deployment_meta", "shape_of", "shapes", "shapes_line",
           "with_shape_knob"]

SHAPE_KNOB = "tensor_parallel_size"  # the knob's name and the runtime key it sets
SHAPE_PATH = f"runtime.{SHAPE_KNOB}"


class Shape(NamedTuple):
    tensor_parallel_size: int  # GPUs per replica
    replicas: int  # behind a least-outstanding-requests load balancer

    @property
    def label(self) -> str:
        return f"TP {self.tensor_parallel_size} x {self.replicas} replica{'s' if self.replicas > 1 else ''}"


def shapes(devices: int, info: ModelInfo) -> tuple[Shape, ...]:
    """Every shape that fills `devices` with replicas of whole heads, the smallest degree first."""
    found = []
    for degree in range(1, devices + 1):
        if devices % degree:
            continue
        try:
            check_tensor_parallel(degree, info)
        except ConfigError:
            continue
        found.append(Shape(degree, devices // degree))
    return tuple(found)


def shapes_line(devices: int, info: ModelInfo) -> str:
    """The console's line on the shapes a study searches (simulated or real)."""
    found = shapes(devices, info)
    return (f"deployment: {devices} devices; shapes {', '.join(s.label for s in found)}"
            + (f" (searched as {SHAPE_KNOB})" if len(found) > 1 else "")
            + "; a capacity is the whole deployment's (least-outstanding-requests balancer over the replicas)")


def shape_of(config: EngineConfig, devices: int) -> Shape:
    """The shape a config deploys on `devices`; its degree must divide them."""
    degree = config.tensor_parallel_size
    if devices % degree:
        raise ConfigError(f"runtime.tensor_parallel_size: {degree} does not divide devices ({devices})")
    return Shape(degree, devices // degree)


def with_shape_knob(search: SearchConfig, devices: int, info: ModelInfo) -> SearchConfig:
    """`search` with the degree as a knob over `shapes(devices, info)`, unless one device, one shape, or the space
    declares the knob itself (then its declaration stands)."""
    degrees = [s.tensor_parallel_size for s in shapes(devices, info)]
    declared = any(p.path == SHAPE_PATH for p in search.params.values())
    if len(degrees) < 2 or declared:
        return search
    knob = ParamConfig(path=SHAPE_PATH, type="categorical", choices=degrees)
    return dataclasses.replace(search, params={**search.params, SHAPE_KNOB: knob})


def deployment_meta(config: EngineConfig, devices: int) -> dict[str, int] | None:
    """best.yaml's `metadata.deployment` (and what vllm.yaml's comment reads): None for one device."""
    if devices == 1:
        return None
    shape = shape_of(config, devices)
    return {"devices": devices, "tensor_parallel_size": shape.tensor_parallel_size, "replicas": shape.replicas}


def deployment_line(config: EngineConfig, devices: int) -> str:
    """The report's line on the exported shape ("" for one device)."""
    if devices == 1:
        return ""
    shape = shape_of(config, devices)
    return (f"{shape.label} on {devices} devices (tensor-parallel-size {shape.tensor_parallel_size}, "
            f"{shape.replicas} behind a least-outstanding-requests balancer); the capacity is the whole deployment's")
