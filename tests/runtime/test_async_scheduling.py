"""Async scheduling (`scheduler.async_scheduling`, runtime.overlap): the same tokens as synchronous stepping, under
every scheduling regime, with stops seen one step late and the extra token of a stopped sequence never reported."""

from __future__ import annotations

import dataclasses
import gc
import weakref

import pytest

from runtime import LLMEngine, RequestOutputKind, SamplingParams, StepLog
from runtime.config import ConfigError, EngineConfig
from runtime.limits import async_scheduling_on
from runtime.model.tokenizer import encode_prompt
from runtime.sim import VirtualClock, sim_engine
from tests.conftest import prompt_set
from tests.factories import assert_drained, make_llm
from tests.runtime.sim.sim_factories import tiny_profile
from tests.runtime.test_greedy_equality import REGIMES


def _params(stop_id: int) -> list[SamplingParams]:
    """One per prompt of `prompt_set()`: greedy, seeded draws (temperature, top-k, top-p), a stop token id, n=3,
    EOS honoured."""
    return [SamplingParams(max_tokens=12, temperature=0.0),
            SamplingParams(max_tokens=7, temperature=0.8, seed=3),
            SamplingParams(max_tokens=12, temperature=1.0, top_k=20, seed=5),
            SamplingParams(max_tokens=9, temperature=0.7, top_p=0.9),
            SamplingParams(max_tokens=12, temperature=0.0, stop_token_ids=[stop_id]),
            SamplingParams(max_tokens=5, n=3, temperature=0.9, seed=1),
            SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True)]


STOP_AT = 4  # the stop-token request stops at its 4th token (the greedy token there, found by a first run)


@pytest.fixture(scope="module")
def stop_id(llama_dir) -> int:
    out = make_llm(llama_dir, block_size=4).generate([prompt_set()[4]], SamplingParams(max_tokens=12, temperature=0.0),
                                                     use_tqdm=False)
    tokens = out[0].outputs[0].token_ids
    assert tokens[STOP_AT - 1] not in tokens[: STOP_AT - 1]
    return tokens[STOP_AT - 1]


def _run(folder, stop_id: int, **knobs) -> tuple[list, object]:
    llm = make_llm(folder, **knobs)
    outs = llm.generate(prompt_set(), _params(stop_id), use_tqdm=False)
    assert_drained(llm)
    return [[(c.token_ids, c.finish_reason) for c in o.outputs] for o in outs], llm


ASYNC_REGIMES = ["block_size_16", "two_tiers", "max_num_seqs_1", "chunked_tiny_budget", "preempt_recompute",
                 "preempt_swap", "prefix_caching", "pad_multiple_8"]


@pytest.mark.parametrize("regime", ASYNC_REGIMES)
def test_async_outputs_equal_sync(llama_dir, stop_id, regime):
    sync, _ = _run(llama_dir, stop_id, **REGIMES[regime])
    overlapped, llm = _run(llama_dir, stop_id, async_scheduling=True, **REGIMES[regime])
    assert llm.engine.overlapped
    assert overlapped == sync
    assert sync[4][0] == (sync[4][0][0][:STOP_AT], "stop")  # the stop token ended it at the 4th token
    assert [len(o) for o in sync] == [1, 1, 1, 1, 1, 3, 1]


def test_preemption_happens_under_async(llama_dir, stop_id):
    for mode in ("recompute", "swap"):
        _, llm = _run(llama_dir, stop_id, async_scheduling=True, **REGIMES[f"preempt_{mode}"])
        assert llm.engine.totals.preempted >= 1, mode


def _stream(folder, async_scheduling: bool, stop_id: int, abort_after: int | None = None):
    """Every CUMULATIVE output of each request, step by step; `abort_after`: request "r1" aborted after that
    many steps."""
    engine = make_llm(folder, block_size=4, async_scheduling=async_scheduling).engine
    for i, (prompt, params) in enumerate(zip(prompt_set(), _params(stop_id))):
        engine.add_request(f"r{i}", prompt, dataclasses.replace(params, output_kind=RequestOutputKind.CUMULATIVE))
    seen: dict[str, list[list[list[int]]]] = {}
    steps = 0
    while engine.has_unfinished_requests():
        for out in engine.step():
            seen.setdefault(out.request_id, []).append([list(c.token_ids) for c in out.outputs])
        steps += 1
        if steps == abort_after:
            engine.abort("r1")
    return seen


def test_streams_report_the_same_tokens_in_the_same_order(llama_dir, stop_id):
    """Each request's reports, one by one, are the synchronous engine's (each a step later)."""
    sync, overlapped = _stream(llama_dir, False, stop_id), _stream(llama_dir, True, stop_id)
    assert overlapped == sync
    assert [len(r[0]) for r in sync["r4"]] == list(range(1, STOP_AT + 1))  # a report per token, the stop token last


def test_a_stopped_sequence_computes_one_token_more_and_it_is_never_reported(llama_dir, stop_id):
    """The stop-token request is scheduled once more after its stop (its row computed, then dropped)."""
    engine = make_llm(llama_dir, block_size=4, async_scheduling=True).engine
    dropped = []
    update = engine.scheduler.update_computed_rows

    def spy(out):
        rows = update(out)
        dropped.extend(item.seq.request.request_id for item in out.scheduled if item.seq.status.name == "FINISHED")
        return rows

    engine.scheduler.update_computed_rows = spy
    engine.add_request("stop", prompt_set()[4], _params(stop_id)[4])
    reports = []
    while engine.has_unfinished_requests():
        reports += [list(o.outputs[0].token_ids) for o in engine.step()]
    assert dropped == ["stop"]
    assert [len(r) for r in reports] == [1, 2, 3, 4]
    assert reports[-1][-1] == stop_id


def test_abort_mid_generation_ends_with_the_synchronous_tokens(llama_dir, stop_id):
    sync = _stream(llama_dir, False, stop_id, abort_after=4)
    overlapped = _stream(llama_dir, True, stop_id, abort_after=4)
    assert 0 < len(sync["r1"][-1][0]) < 7  # aborted mid-generation
    assert overlapped == sync


def test_logprobs_steps_sample_on_the_host_with_equal_results(llama_dir):
    params = [SamplingParams(max_tokens=6, temperature=0.0, logprobs=3), SamplingParams(max_tokens=8, temperature=0.0)]
    results = []
    for overlapped in (False, True):
        outs = make_llm(llama_dir, block_size=4, async_scheduling=overlapped).generate(
            prompt_set()[:2], params, use_tqdm=False)
        results.append([(o.outputs[0].token_ids, o.outputs[0].logprobs) for o in outs])
    assert results[1] == results[0]
    assert len(results[0][0][1]) == 6


def test_async_scheduling_is_an_engine_argument_refused_with_tensor_parallel():
    assert EngineConfig.from_flat("tiny", async_scheduling=True).scheduler.async_scheduling
    assert EngineConfig.from_flat("tiny").scheduler.async_scheduling is None  # the device decides
    with pytest.raises(ConfigError, match=r"scheduler\.async_scheduling: is not supported with tensor_parallel_size"):
        EngineConfig.from_flat("tiny", async_scheduling=True, tensor_parallel_size=2)


def test_by_default_async_scheduling_is_on_for_one_cuda_device_only():
    default, tp2 = EngineConfig.from_flat("tiny"), EngineConfig.from_flat("tiny", tensor_parallel_size=2)
    forced_on, forced_off = (EngineConfig.from_flat("tiny", async_scheduling=flag) for flag in (True, False))
    table = [(async_scheduling_on(c, device), async_scheduling_on(c.synchronous(), device))
             for c in (default, tp2, forced_on, forced_off) for device in ("cuda", "cpu")]
    assert table == [(True, False), (False, False), (False, False), (False, False),
                     (True, False), (True, False), (False, False), (False, False)]


def test_a_default_engine_on_a_cpu_steps_synchronously(llama_dir):
    assert not make_llm(llama_dir, block_size=4).engine.overlapped


def test_a_simulated_engine_steps_synchronously():
    config = EngineConfig.from_flat("tiny", async_scheduling=True)
    engine = sim_engine(config, tiny_profile(), VirtualClock())
    assert isinstance(engine, LLMEngine) and not engine.overlapped


def test_smollm2_async_equals_sync_with_stop_strings(smollm2_llm):
    """The real model (its weights shared with the fixture's engine), greedy and seeded, stop strings, EOS."""
    prompts = ["The capital of France is", "Write a list of three fruits:", "1, 2, 3,"]
    params = [SamplingParams(max_tokens=24, temperature=0.0, stop=["."]),
              SamplingParams(max_tokens=10, temperature=0.8, seed=7),
              SamplingParams(max_tokens=16, temperature=0.0, stop=[" 6"])]
    sync = smollm2_llm.generate(prompts, params, use_tqdm=False)
    config = smollm2_llm.config
    config = dataclasses.replace(config, scheduler=dataclasses.replace(config.scheduler, async_scheduling=True),
                                 debug_integrity=False)  # its pool is large: checked on the tiny model above
    engine = LLMEngine(config, model=smollm2_llm.engine.model, tokenizer=smollm2_llm.tokenizer)
    for i, (prompt, p) in enumerate(zip(prompts, params)):
        engine.add_request(str(i), encode_prompt(smollm2_llm.tokenizer, prompt),
                           dataclasses.replace(p, output_kind=RequestOutputKind.FINAL_ONLY))
    done = {}
    while engine.has_unfinished_requests():
        done.update((o.request_id, o.outputs[0]) for o in engine.step())
    got = [(c.token_ids, c.text, c.finish_reason) for c in (done[str(i)] for i in range(len(prompts)))]
    expected = [(c.token_ids, c.text, c.finish_reason) for o in sync for c in o.outputs]
    assert got == expected
    assert [reason for *_, reason in expected] == ["stop", "length", "stop"]


def test_the_step_log_refuses_an_async_engine(llama_dir):
    with pytest.raises(ValueError, match=r"scheduler\.async_scheduling must be false"):
        StepLog(make_llm(llama_dir, block_size=4, async_scheduling=True).engine)


def test_a_dropped_async_engine_and_its_kv_pool_go_with_its_last_reference(llama_dir):
    """The stepper refers back to its engine weakly, so no cycle holds a dropped engine's pool until the garbage
    collector runs (on a GPU the next engine's memory plan then found the old pool still there: out of memory)."""
    llm = make_llm(llama_dir, block_size=4, async_scheduling=True)
    llm.generate([[5, 6, 7]], SamplingParams(max_tokens=3, temperature=0.0), use_tqdm=False)
    engine, pool = weakref.ref(llm.engine), weakref.ref(llm.engine.runner.caches[0].k)
    assert llm.engine.overlapped
    gc.collect()
    gc.disable()
    try:
        del llm
        assert (engine(), pool()) == (None, None)
    finally:
        gc.enable()
