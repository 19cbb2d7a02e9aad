"""The balancer's rule, one copy for the simulated deployment and the real replicas: a request goes to the replica
with the fewest requests outstanding (sent and not finished), the lowest index of equals, as vLLM's router and
most L7 balancers do under `least_request`.

    outstanding  [2, 1, 1]   pick() -> 1 (the fewest; 1 before 2)
    add(1)       [2, 2, 1]   pick() -> 2
    done(0)      [1, 2, 1]   pick() -> 0

Torch-free and engine-free: `balancer.Deployment` places simulated requests with it, `tuner.measure.http_replay`
sends requests to the replicas' URLs with it.
"""

from __future__ import annotations

__all__ = ["LeastOutstanding"]


class LeastOutstanding:
    def __init__(self, replicas: int) -> None:
        if replicas < 1:
            raise ValueError(f"replicas: must be >= 1, got {replicas}")
        self.outstanding = [0] * replicas

    def pick(self) -> int:
        """The replica the next request goes to (nothing changes until `add`)."""
        return min(range(len(self.outstanding)), key=lambda i: (self.outstanding[i], i))

    def add(self, replica: int) -> None:
        """A request was sent to `replica`."""
        self.outstanding[replica] += 1

    def done(self, replica: int) -> None:
        """A request of `replica` finished (or failed): it is no longer outstanding."""
        self.outstanding[replica] -= 1

    def reset(self) -> None:
        self.outstanding = [0] * len(self.outstanding)
