"""The balancer's rule, as the real replicas' dispatcher (`tuner.measure.http_replay`) and the simulated deployment
(`Deployment`) apply it: on one scripted sequence of arrivals and completions, the same replica for each request."""

from __future__ import annotations

from typing import NamedTuple

import pytest

from runtime import VirtualClock
from tuner.deployment import Deployment, LeastOutstanding

# arrive RID, or finish RID; 3 replicas
SCRIPT = ("+a", "+b", "+c", "+d", "-b", "+e", "+f", "-a", "-d", "+g", "+h", "-c", "-e", "-f", "-g", "-h", "+i",
          "+j")
EXPECTED = {"a": 0, "b": 1, "c": 2, "d": 0, "e": 1, "f": 1, "g": 0, "h": 0, "i": 0, "j": 1}


class _Finished(NamedTuple):
    request_id: str
    finished: bool = True


class _ScriptedEngine:
    """An engine double whose requests finish when the script says (what a real engine's timing cannot be made to
    do): `finish(rid)`, then its next `step` returns that request finished. Each step costs one second of its
    clock, so the deployment steps every busy replica in turn."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock, self.open, self.finishing = clock, set(), set()

    def add_request(self, request_id, prompt_token_ids, params=None, arrival_time=None, priority=0) -> None:
        self.open.add(request_id)

    def has_unfinished_requests(self) -> bool:
        return bool(self.open)

    def step(self) -> list[_Finished]:
        self.clock.advance(1.0)
        done, self.finishing = self.finishing & self.open, self.finishing - self.open
        self.open -= done
        return [_Finished(rid) for rid in sorted(done)]

    def reset(self) -> None:
        self.open, self.finishing = set(), set()


def _dispatched(script: tuple[str, ...], replicas: int) -> dict[str, int]:
    """What the HTTP replay does: pick and add at a request's send, done at its stream's end."""
    rule, placed = LeastOutstanding(replicas), {}
    for event in script:
        rid = event[1:]
        if event[0] == "+":
            placed[rid] = rule.pick()
            rule.add(placed[rid])
        else:
            rule.done(placed[rid])
    return placed


def _simulated(script: tuple[str, ...], replicas: int) -> dict[str, int]:
    clocks = [VirtualClock() for _ in range(replicas)]
    engines = [_ScriptedEngine(c) for c in clocks]
    deployment = Deployment(engines, clocks)
    for event in script:
        rid = event[1:]
        if event[0] == "+":
            deployment.add_request(rid, [1, 2, 3])
            continue
        engines[deployment.placed[rid]].finishing.add(rid)
        while not any(out.request_id == rid for out in deployment.step()):
            pass
    return dict(deployment.placed)


def test_the_dispatcher_places_each_request_where_the_simulated_balancer_does():
    assert _dispatched(SCRIPT, 3) == EXPECTED
    assert _simulated(SCRIPT, 3) == EXPECTED


def test_ties_go_to_the_lowest_index_and_a_reset_forgets_every_request():
    rule = LeastOutstanding(2)
    assert rule.pick() == 0
    rule.add(0)
    assert rule.pick() == 1
    rule.add(1)
    rule.add(1)
    rule.done(0)
    assert (rule.outstanding, rule.pick()) == ([0, 2], 0)
    rule.reset()
    assert (rule.outstanding, rule.pick()) == ([0, 0], 0)
    with pytest.raises(ValueError, match=r"^replicas: must be >= 1, got 0$"):
        LeastOutstanding(0)
