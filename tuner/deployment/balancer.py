"""Replicas behind a load balancer, as the replay sees them: one engine-like `Deployment` over several engines.

Each replica is a simulated engine on its own virtual clock (they step side by side in reality). The replay
admits a request once the deployment's clock reaches its arrival, and the balancer hands it to the replica with
the fewest outstanding requests (the lowest index of equals: `LeastOutstanding`, the rule the real replicas'
dispatcher follows too). The deployment always steps the busy replica furthest behind, so the replicas' clocks stay
within one step of each other; the deployment's clock is that replica's (every replica's, once all are idle).

    replica 0  |--step--|--step--|--step--|           clock = min over busy replicas
    replica 1  |----step----|----step----|            a request arriving before it waits for that replica's
                        ^ deployment clock               next step, as it would on a real server (within a step)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from runtime import LLMEngine, RequestOutput, SamplingParams, VirtualClock
from tuner.deployment.least_outstanding import LeastOutstanding

__all__ = ["Deployment", "DeploymentClock", "DeploymentTotals"]


class DeploymentClock:
    """The replay's clock over the replicas' clocks (`Deployment.clock`)."""

    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment
        self.skipped_s = 0.0

    def restart(self) -> None:
        for c in self.deployment.clocks:
            c.restart()
        self.skipped_s = 0.0

    def __call__(self) -> float:
        busy = self.deployment.busy()
        return min(c() for _, c in busy) if busy else max(c() for c in self.deployment.clocks)

    def jump_to(self, t: float) -> None:
        """Every replica's clock forward to `t` (the replay skips an idle gap of the whole deployment)."""
        now = self()
        if t > now:
            self.skipped_s += t - now
        for c in self.deployment.clocks:
            c.jump_to(t)


class DeploymentTotals(NamedTuple):
    kv_util_mean: float  # the replicas' means, averaged
    kv_util_peak: float  # the highest replica's
    kv_waste_mean: float


class Deployment:
    """`LLMEngine`'s replay surface (reset, add_request, step, has_unfinished_requests, totals) over replicas."""

    def __init__(self, engines: Sequence[LLMEngine], clocks: Sequence[VirtualClock]) -> None:
        self.engines, self.clocks = list(engines), list(clocks)
        self.clock = DeploymentClock(self)
        self.balancer = LeastOutstanding(len(self.engines))
        self.placed: dict[str, int] = {}  # request id -> its replica, for the replay since the last reset

    def busy(self) -> list[tuple[int, VirtualClock]]:
        return [(i, self.clocks[i]) for i, e in enumerate(self.engines) if e.has_unfinished_requests()]

    def reset(self) -> None:
        for e in self.engines:
            e.reset()
        self.balancer.reset()
        self.placed.clear()

    def has_unfinished_requests(self) -> bool:
        return any(e.has_unfinished_requests() for e in self.engines)

    def add_request(self, request_id: str, prompt_token_ids: Sequence[int], params: SamplingParams | None = None,
                    arrival_time: float | None = None, priority: int = 0) -> None:
        replica = self.balancer.pick()
        if not self.engines[replica].has_unfinished_requests() and arrival_time is not None:
            self.clocks[replica].jump_to(arrival_time)  # an idle replica's clock catches up with the arrival
        self.engines[replica].add_request(request_id, prompt_token_ids, params, arrival_time, priority)
        self.balancer.add(replica)
        self.placed[request_id] = replica

    def step(self) -> list[RequestOutput]:
        """One step of the busy replica furthest behind."""
        replica = min(self.busy(), key=lambda b: (b[1](), b[0]))[0]
        outs = self.engines[replica].step()
        for out in outs:
            if out.finished:
                self.balancer.done(self.placed[out.request_id])
        return outs

    @property
    def totals(self) -> DeploymentTotals:
        totals: list[Any] = [e.totals for e in self.engines]
        return DeploymentTotals(sum(t.kv_util_mean for t in totals) / len(totals),
                                max(t.kv_util_peak for t in totals),
                                sum(t.kv_waste_mean for t in totals) / len(totals))
