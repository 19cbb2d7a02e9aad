"""A config deployed on `devices` simulated GPUs: one simulated engine (TP over its devices), or several behind
the balancer (`Deployment`), each on its own virtual clock."""

from __future__ import annotations

from runtime import EngineConfig, GpuProfile, LLMEngine, StepTimeModel, VirtualClock, sim_engine
from tuner.deployment.balancer import Deployment, DeploymentClock
from tuner.deployment.shape import shape_of, shapes, shapes_line

__all__ = ["deployment_label", "deployment_notes", "sim_deployment"]


def sim_deployment(config: EngineConfig, profile: GpuProfile, step_model: StepTimeModel | None,
                   devices: int) -> tuple[LLMEngine | Deployment, VirtualClock | DeploymentClock]:
    """The engine the replay drives and its clock: `config`'s replicas on `devices` GPUs of the profile."""
    replicas = shape_of(config, devices).replicas
    clocks = [VirtualClock() for _ in range(replicas)]
    engines = [sim_engine(config, profile, c, step_model) for c in clocks]
    if replicas == 1:
        return engines[0], clocks[0]
    deployment = Deployment(engines, clocks)
    return deployment, deployment.clock


def deployment_label(devices: int, profile: GpuProfile) -> str:
    """What a simulated figure adds about the deployment: its devices, and an all-reduce cost that was not measured."""
    if devices == 1:
        return ""
    unmeasured = [s.tensor_parallel_size for s in shapes(devices, profile.info)
                  if s.tensor_parallel_size > 1 and not profile.allreduce_cost(s.tensor_parallel_size).measured]
    return f"; {devices} devices" + (f", all-reduce at TP {unmeasured} estimated, not measured" if unmeasured else "")


def deployment_notes(devices: int, profile: GpuProfile) -> list[str]:
    """Console lines: the shapes searched, and how a tensor-parallel step is simulated."""
    if devices == 1:
        return []
    lines = [shapes_line(devices, profile.info)]
    for s in shapes(devices, profile.info):
        if s.tensor_parallel_size > 1:
            cost = profile.allreduce_cost(s.tensor_parallel_size)
            how = "measured" if cost.measured else "unmeasured estimate (runtime/sim/parallel.py)"
            lines.append(f"TP {s.tensor_parallel_size}: work / {s.tensor_parallel_size} per rank, eager steps (no CUDA "
                         f"graphs), all-reduce {cost.latency_s * 1e6:.0f} us + {cost.s_per_byte * 1e9:.2g} ns/byte "
                         f"({how})")
    return lines
