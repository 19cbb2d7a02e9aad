"""`EngineCore`: one message per step, each request's NEW tokens only, the finished ones' timings, aborts."""

from __future__ import annotations

from dataclasses import replace

import pytest

from runtime import LLMEngine, RequestOutputKind
from runtime.serve.engine_core import Abort, Add, Delta, EngineCore, Timing
from tests.factories import greedy
from tests.runtime.serve.server_factories import server_config


@pytest.fixture(scope="module")
def engine():
    return LLMEngine(server_config("tiny"))


def _final_tokens(engine: LLMEngine, prompts: dict[str, list[int]], n: int) -> dict[str, list[int]]:
    """The same requests run to the end on the bare engine (FINAL_ONLY): what the deltas must add up to."""
    engine.reset()
    for rid, prompt in prompts.items():
        engine.add_request(rid, prompt, replace(greedy(n), output_kind=RequestOutputKind.FINAL_ONLY))
    outs = []
    while engine.has_unfinished_requests():
        outs += engine.step()
    engine.reset()
    return {o.request_id: o.outputs[0].token_ids for o in outs}


def test_each_step_sends_the_new_token_of_each_request_then_its_timing(engine):
    prompts = {"a": [5, 6, 7], "b": [9, 8, 7, 6, 5]}
    expected = _final_tokens(engine, prompts, 3)
    core = EngineCore(engine)
    for rid, prompt in prompts.items():
        core.apply(Add(rid, prompt, greedy(3)))
    steps = []
    while core.busy:
        steps.append(core.step())
    a, b = expected["a"], expected["b"]
    assert [s.deltas() for s in steps] == [  # both prompts fit the first step's token budget
        [Delta("a", a[:1], None), Delta("b", b[:1], None)],
        [Delta("a", a[1:2], None), Delta("b", b[1:2], None)],
        [Delta("a", a[2:], "length", done=True), Delta("b", b[2:], "length", done=True)]]
    assert [(s.busy, s.preempted, s.stats.num_running) for s in steps] == [(True, 0, 2), (True, 0, 2), (False, 0, 0)]
    timings = steps[-1].finished
    assert [(t.prompt_tokens, t.output_tokens) for t in timings] == [(3, 3), (5, 3)]
    assert all(isinstance(t, Timing) and t.arrival_time <= t.first_token_time <= t.finished_time for t in timings)
    assert [s.finished for s in steps[:-1]] == [[], []]


def test_an_abort_frees_the_blocks_and_is_no_finished_request(engine):
    core = EngineCore(engine)
    core.apply(Add("x", [1, 2, 3], greedy(100)))
    first = core.step()
    assert first.stats.kv_used_blocks == 1
    core.apply(Abort("x"))
    assert engine.last_step.kv_used_blocks == 1 and core.busy  # freed now, the abort reported by the next step
    aborted = core.step()
    assert (aborted.deltas(), aborted.finished, aborted.busy) == ([Delta("x", [], "abort", done=True)], [], False)
    assert aborted.stats.kv_used_blocks == 0
    core.apply(Add("x", [1, 2, 3], greedy(1)))  # the id is free again: nothing of the aborted one is left
    assert core.step().deltas() == [Delta("x", first.token_ids[0], "length", done=True)]


def test_n_samples_report_apart_and_one_can_be_stopped_alone(engine):
    """n = 2: an entry per sample per step; `Abort(id, 1, "stop")` ends sample 1 alone (reported once, "stop"), and
    sample 0 runs to its length, its last entry `done`; every block is freed at the end."""
    engine.reset()
    core = EngineCore(engine)
    core.apply(Add("n", [3, 1, 4], replace(greedy(4), n=2)))
    first = core.step().deltas()
    assert [(d.index, len(d.token_ids), d.finish_reason, d.done) for d in first] == [(0, 1, None, False),
                                                                                     (1, 1, None, False)]
    core.apply(Abort("n", 1, "stop"))
    steps = []
    while core.busy:
        steps.append(core.step())
    entries = [(d.index, len(d.token_ids), d.finish_reason, d.done) for s in steps for d in s.deltas()]
    assert entries == [(0, 1, None, False), (1, 0, "stop", False), (0, 1, None, False), (0, 1, "length", True)]
    assert [(t.prompt_tokens, t.output_tokens) for t in steps[-1].finished] == [(3, 5)]  # 4 + the 1 sample 1 had
    assert steps[-1].stats.kv_used_blocks == 0
