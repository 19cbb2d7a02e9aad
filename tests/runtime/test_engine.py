"""Engine behaviour: sampling, forks, aborts, rejections, output kinds, memory sizing, timestamps, step stats."""

from __future__ import annotations

import dataclasses

import pytest

from runtime import ConfigError, LLMEngine, RequestOutputKind, SamplingParams
from runtime.memory import InsufficientMemoryError
from tests.factories import assert_drained, greedy, make_llm

PROMPT = [5, 17, 99, 300, 42, 7, 8, 9, 10, 11]


def sample(seed: int | None, n: int = 1, max_tokens: int = 12) -> SamplingParams:
    return SamplingParams(n=n, temperature=1.0, top_p=0.9, top_k=50, seed=seed, max_tokens=max_tokens, ignore_eos=True)


def test_seeded_sampling_is_reproducible_across_batches(llama_dir):
    alone = make_llm(llama_dir, block_size=4).generate([PROMPT], sample(7), use_tqdm=False)
    crowd = make_llm(llama_dir, block_size=4).generate([[3, 4, 5], PROMPT, [9] * 20], sample(7), use_tqdm=False)
    other = make_llm(llama_dir, block_size=4).generate([PROMPT], sample(8), use_tqdm=False)
    assert alone[0].outputs[0].token_ids == crowd[1].outputs[0].token_ids
    assert alone[0].outputs[0].token_ids != other[0].outputs[0].token_ids


def test_n4_samples_share_prompt_blocks_then_diverge(llama_dir):
    llm = make_llm(llama_dir, block_size=4)
    engine = llm.engine
    engine.add_request("r", PROMPT, sample(3, n=4, max_tokens=8))
    while not any(len(r.seqs) == 4 for r in engine.requests.values()):
        engine.step()
    seqs = engine.requests["r"].seqs
    tables = [engine.kv.block_table(s) for s in seqs]
    pool = engine.kv.pools[0]
    # 10 prompt tokens in blocks of 4: right after the fork all four samples share all three blocks.
    assert len({tuple(t) for t in tables}) == 1
    assert [pool.ref_count(b) for b in tables[0]] == [4, 4, 4]
    engine.step()
    tables = [engine.kv.block_table(s) for s in seqs]
    # Writing their first tokens, three samples copied the partial third block; the last kept the original.
    assert len({tuple(t[:2]) for t in tables}) == 1
    assert [pool.ref_count(b) for b in tables[0][:2]] == [4, 4]
    assert len({t[2] for t in tables}) == 4
    assert [pool.ref_count(t[2]) for t in tables] == [1, 1, 1, 1]
    outs = []
    while engine.has_unfinished_requests():
        outs += [o for o in engine.step() if o.finished]
    tokens = [c.token_ids for c in outs[0].outputs]
    assert [c.index for c in outs[0].outputs] == [0, 1, 2, 3]
    assert all(len(t) == 8 for t in tokens)
    assert len({tuple(t) for t in tokens}) == 4
    assert_drained(llm)


def test_abort_mid_generation_frees_every_block(llama_dir):
    llm = make_llm(llama_dir, block_size=4, enable_prefix_caching=False)
    engine = llm.engine
    for i in range(3):
        engine.add_request(f"r{i}", PROMPT * (i + 1), greedy(40))
    for _ in range(5):
        engine.step()
    assert sum(p.num_used for p in engine.kv.pools) > 0
    for i in range(3):
        engine.abort(f"r{i}")
    outs = engine.step()
    assert sorted((o.request_id, o.outputs[0].finish_reason) for o in outs) == [
        ("r0", "abort"), ("r1", "abort"), ("r2", "abort")]
    assert_drained(llm)


def test_cumulative_requests_report_every_step_final_only_ones_once(llama_dir):
    engine = make_llm(llama_dir, block_size=4).engine
    final = RequestOutputKind.FINAL_ONLY
    engine.add_request("c", PROMPT, greedy(5))
    engine.add_request("f", PROMPT, dataclasses.replace(greedy(5), output_kind=final))
    engine.add_request("f2", PROMPT, dataclasses.replace(sample(4, n=2, max_tokens=3), output_kind=final))
    reports = []
    while engine.has_unfinished_requests():
        reports += [(o.request_id, [len(c.token_ids) for c in o.outputs], o.finished) for o in engine.step()]
    assert reports == [("c", [1], False), ("c", [2], False), ("c", [3], False), ("f2", [3, 3], True),
                       ("c", [4], False), ("c", [5], True), ("f", [5], True)]


def test_output_kind_must_be_a_request_output_kind():
    with pytest.raises(ConfigError, match=r"SamplingParams.output_kind: must be one of \['CUMULATIVE', 'FINAL_ONLY'\]"):
        SamplingParams(output_kind="final_only")


def test_rejections_name_the_reason_and_never_block(llama_dir):
    llm = make_llm(llama_dir, block_size=4, max_model_len=64)
    engine = llm.engine
    engine.add_request("long", list(range(3, 63)), greedy(10))
    engine.add_request("empty", [], greedy(10))
    engine.add_request("vocab", [1, 9999], greedy(10))
    engine.add_request("ok", PROMPT, greedy(4))
    reasons = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                reasons[out.request_id] = out.rejected_reason
    assert reasons == {
        "long": "prompt (60 tokens) + max_tokens (10) = 70 exceeds max_model_len 64",
        "empty": "empty prompt",
        "vocab": "prompt token ids must be in [0, 512), got range [1, 9999]",
        "ok": None,
    }
    assert_drained(llm)


def test_too_little_memory_is_a_clear_error_at_start(llama_dir):
    with pytest.raises(InsufficientMemoryError, match=r"holds \d+ blocks but one request of 256 tokens needs 16"):
        make_llm(llama_dir, block_size=16, device_memory_gb=0.008)


def test_budget_below_max_model_len_without_chunking_is_a_config_error(llama_dir):
    with pytest.raises(ConfigError, match=r"scheduler.max_num_batched_tokens \(64\) must be >= max_model_len"):
        make_llm(llama_dir, enable_chunked_prefill=False, max_num_batched_tokens=64)


def test_timestamps_and_step_stats(llama_dir):
    ticks = iter(range(1, 10_000))
    engine = LLMEngine(make_llm(llama_dir, block_size=4).config, clock=lambda: float(next(ticks)))
    engine.add_request("a", PROMPT, greedy(3), arrival_time=0.0)
    outs = engine.step()
    first = engine.last_step
    assert (first.num_running, first.num_batched_tokens, first.kv_used_blocks) == (1, 10, 3)
    assert (first.kv_allocated_slots, first.kv_used_slots) == (12, 10)
    while engine.has_unfinished_requests():
        outs += engine.step()
    m = outs[-1].metrics
    assert m.arrival_time == 0.0
    # one tick at scheduling, one after the tokens reached the host, one for the step's stats
    assert m.first_scheduled_time == 1.0 and m.first_token_time == 2.0 == m.token_times[0]
    assert m.token_times == [2.0, 5.0, 8.0] and m.finished_time == 8.0
    assert engine.totals.steps == 3 and engine.totals.busy_steps == 3


def test_sliding_window_models_are_capped_at_their_window(tmp_path):
    """Within its window sliding-window attention equals full attention, so the cap keeps outputs exact."""
    import torch
    from transformers import AutoModelForCausalLM, MistralConfig

    config = MistralConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                           sliding_window=64)
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(tmp_path)
    assert make_llm(tmp_path, block_size=4).engine.max_model_len == 64
    with pytest.raises(ConfigError, match=r"scheduler.max_model_len \(128\) exceeds the model's sliding window \(64\)"):
        make_llm(tmp_path, block_size=4, max_model_len=128)


def test_reset_gives_a_fresh_engine_on_the_same_pool(llama_dir):
    """After reset() a run repeats exactly (no prefix hits carried over), on the very same KV tensors."""
    llm = make_llm(llama_dir, block_size=4)
    engine = llm.engine
    caches = [c.k.data_ptr() for c in engine.runner.caches]

    def run() -> list[tuple[str, list[int], int]]:
        for i, prompt in enumerate((PROMPT, PROMPT[:9], [*PROMPT, 5, 6])):
            engine.add_request(f"r{i}", prompt, greedy(4), arrival_time=0.0)
        outs = []
        while engine.has_unfinished_requests():
            outs += engine.step()
        return [(o.request_id, o.outputs[0].token_ids, o.metrics.num_cached_tokens) for o in outs if o.finished]

    first = run()
    engine.add_request("left-behind", PROMPT, greedy(50))
    engine.step()
    engine.reset()
    assert engine.kv.pools[0].num_free == engine.kv.pools[0].num_blocks and engine.kv.pools[0].num_cached == 0
    assert not engine.has_unfinished_requests() and engine.totals.steps == 0 and engine.last_step is None
    assert run() == first
    assert [c.k.data_ptr() for c in engine.runner.caches] == caches
    assert_drained(llm)


def test_a_gpu_partly_held_by_another_process_is_a_clear_error_naming_the_knob(monkeypatch):
    """A stand-in for what no CPU machine can show: 60 of 140 GiB held elsewhere, 0.9 x 140 GiB asked."""
    import torch

    from runtime.placement import _check_free

    gib = 1 << 30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (70 * gib, 140 * gib))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: 10 * gib)  # this process: the weights
    with pytest.raises(InsufficientMemoryError) as err:
        _check_free(140 * gib, 0.9, torch.device("cuda"))
    assert str(err.value) == (
        "cache.gpu_memory_utilization: 0.9 x 140.0 GiB = 126.0 GiB is more than this process can have: 60.0 GiB of "
        "the GPU are held by other processes. Lower cache.gpu_memory_utilization to 0.56 or less, or free the GPU.")
    _check_free(140 * gib, 0.55, torch.device("cuda"))  # what is left: fine


def test_token_range_remembers_a_tuple_by_identity_and_never_confuses_two():
    from runtime import engine

    first = tuple(range(5, 300))
    assert engine.token_range(first) == (5, 299) and engine._RANGES._entries[(id(first), None)][0] is first
    assert engine.token_range([9, 2, 7]) == (2, 9)  # a list: a pass each time, nothing kept
    other = tuple(range(1, 40))  # another tuple: its own entry, whatever ids the two have
    assert engine.token_range(other) == (1, 39) and engine.token_range(first) == (5, 299)
