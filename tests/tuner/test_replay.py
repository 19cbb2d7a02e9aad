"""Open-loop replay on the real tiny CPU engine: queueing, arrival times, idle skip, forced lengths, early stop."""

from __future__ import annotations

import itertools
import json
import shutil
import time

import pytest

from runtime import EngineConfig, LLMEngine, SamplingParams
from tests.tuner.tuner_factories import burst, request, tiny_engine
from tuner.replay import ReplayClock, replay
from tuner.traffic import TrafficRequest


def assert_empty(engine: LLMEngine) -> None:
    """Nothing left in the engine: no request, integrity green, no block held."""
    assert engine.requests == {}
    assert not engine.has_unfinished_requests()
    engine.check_integrity()
    assert sum(p.num_used for p in engine.kv.pools) == 0


def test_replay_clock_jumps_forward_only(monkeypatch):
    real = [100.0]
    monkeypatch.setattr("tuner.replay.time.perf_counter", lambda: real[0])
    clock = ReplayClock()
    assert (clock(), clock.skipped_s) == (0.0, 0.0)
    real[0] = 100.5
    assert clock() == 0.5
    clock.jump_to(3.0)  # skip an idle gap: 2.5 s that are never waited for
    assert (clock(), clock.skipped_s) == (3.0, 2.5)
    clock.jump_to(1.0)  # never backwards
    clock.jump_to(3.0)  # nor forwards to where it already is
    assert (clock(), clock.skipped_s) == (3.0, 2.5)
    real[0] = 101.25  # real time keeps running on top of what was skipped
    assert clock() == 3.75
    clock.jump_to(10.0)
    assert (clock(), clock.skipped_s) == (10.0, 8.75)


def test_burst_queues_behind_max_num_seqs_1_and_latencies_include_the_wait():
    engine = tiny_engine(scheduler={"max_num_seqs": 1})
    result = replay(engine, burst(4, prompt_len=16, output_tokens=4))
    recs = result.records
    assert [r.request_id for r in recs] == ["r0", "r1", "r2", "r3"]  # FCFS, one at a time
    assert [r.arrival for r in recs] == [0.0] * 4
    for prev, cur in itertools.pairwise(recs):
        assert cur.first_scheduled >= prev.finished  # waited for the one slot
        assert cur.first_token > prev.finished
    ttft = [r.first_token - r.arrival for r in recs]
    assert ttft == sorted(set(ttft))  # strictly increasing in arrival order: the queueing is counted
    assert ttft[3] > recs[2].finished - recs[2].arrival  # r3 waited out r2's whole life
    assert result.duration_s == recs[-1].finished
    assert [r.output_tokens for r in recs] == [4] * 4
    assert_empty(engine)


def test_arrivals_enter_the_engine_no_earlier_than_their_arrival_time():
    engine = tiny_engine()
    admitted: dict[str, float] = {}
    add = engine.add_request

    def add_and_note(rid, *args, **kwargs):
        admitted[rid] = engine.clock()  # the replay clock at the moment the request enters
        add(rid, *args, **kwargs)

    engine.add_request = add_and_note
    arrivals = [0.0, 0.02, 0.05, 0.05, 0.3, 0.31]
    traffic = [request(f"q{i}", t, 12, 3, first_id=10 + 12 * i) for i, t in enumerate(arrivals)]
    result = replay(engine, traffic)
    by_id = {r.request_id: r for r in result.records}
    assert sorted(by_id) == [f"q{i}" for i in range(6)]
    for i, t in enumerate(arrivals):
        rec = by_id[f"q{i}"]
        assert rec.arrival == t  # the logged arrival, not the admission time
        assert admitted[f"q{i}"] >= t
        assert rec.first_scheduled >= t
    times = [s.time for s in result.step_stats]
    assert times == sorted(times)  # the clock never went backwards
    assert all(list(r.token_times) == sorted(r.token_times) for r in result.records)


def test_idle_gap_is_skipped_and_does_not_change_latencies():
    gap = (request("early", 0.0, 16, 4, first_id=10), request("late", 1000.0, 16, 4, first_id=100))
    alone = replay(tiny_engine(), (request("late", 0.0, 16, 4, first_id=100),)).records[0]
    engine = tiny_engine()
    start = time.perf_counter()
    result = replay(engine, gap)
    wall = time.perf_counter() - start
    # The idle 1000 s were skipped, less the busy part (milliseconds; bounds loose for a loaded CI host).
    assert wall < 100.0
    assert 900.0 < engine.clock.skipped_s < 1000.0
    assert result.busy_s < 100.0
    assert result.busy_s + engine.clock.skipped_s >= result.duration_s > 1000.0
    late = {r.request_id: r for r in result.records}["late"]
    assert late.arrival == 1000.0
    e2e, e2e_alone = late.finished - late.arrival, alone.finished - alone.arrival
    ttft, ttft_alone = late.first_token - late.arrival, alone.first_token - alone.arrival
    assert 0.0 < ttft < 0.5 and 0.0 < e2e < 0.5  # not ~1000 s: the gap is not counted as latency
    assert e2e == pytest.approx(e2e_alone, abs=0.25) and ttft == pytest.approx(ttft_alone, abs=0.25)


def test_outputs_are_forced_to_the_logged_lengths():
    lengths = [1, 2, 7, 30]
    traffic = [request(f"n{n}", 0.01 * i, 20, n, first_id=10 + 20 * i) for i, n in enumerate(lengths)]
    result = replay(tiny_engine(), traffic)
    by_id = {r.request_id: r for r in result.records}
    assert [by_id[f"n{n}"].output_tokens for n in lengths] == lengths
    assert [len(by_id[f"n{n}"].token_times) for n in lengths] == lengths


def test_eos_does_not_end_a_replayed_request(llama_dir, tmp_path):
    """A checkpoint whose EOS is the very token it generates first: the replay still runs to the logged length."""
    prompt = [5, 17, 99, 300, 42, 7]
    config = {"model": {"name": str(llama_dir)}, "device": "cpu", "cache": {"device_memory_gb": 0.02}}
    first = _generate(EngineConfig.from_mapping(config), prompt, SamplingParams(max_tokens=1, temperature=0.0))
    folder = shutil.copytree(llama_dir, tmp_path / "eos_first")
    hf = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**hf, "eos_token_id": first.token_ids[0]}))
    config["model"]["name"] = str(folder)
    stops = _generate(EngineConfig.from_mapping(config), prompt, SamplingParams(max_tokens=8, temperature=0.0))
    assert (stops.token_ids, stops.finish_reason) == (first.token_ids, "stop")  # EOS honoured outside replay
    engine = LLMEngine(EngineConfig.from_mapping(config))
    result = replay(engine, [TrafficRequest("eos", 0.0, tuple(prompt), 8, "test:eos")])
    assert result.records[0].output_tokens == 8


def test_rejected_request_is_recorded_with_its_reason():
    engine = tiny_engine()  # max_model_len 128
    traffic = [request("ok", 0.0, 16, 4), request("long", 0.0, 120, 20, first_id=100),
               request("vocab", 0.01, 16, 4, first_id=5000), request("after", 0.05, 16, 4, first_id=300)]
    result = replay(engine, traffic)
    by_id = {r.request_id: r for r in result.records}
    long, vocab = by_id.pop("long"), by_id.pop("vocab")
    assert long.rejected_reason == "prompt (120 tokens) + max_tokens (20) = 140 exceeds max_model_len 128"
    assert vocab.rejected_reason == "prompt token ids must be in [0, 2048), got range [5000, 5015]"
    for rec in (long, vocab):
        assert (rec.output_tokens, rec.first_scheduled, rec.first_token, rec.token_times) == (0, None, None, ())
        assert rec.finished >= rec.arrival
    assert (long.prompt_tokens, vocab.arrival) == (120, 0.01)
    assert [(r.rejected_reason, r.output_tokens) for r in by_id.values()] == [(None, 4), (None, 4)]
    assert_empty(engine)


def test_progress_callback_stops_the_replay_and_leaves_the_engine_empty():
    engine = tiny_engine(scheduler={"max_num_seqs": 2})
    calls: list[tuple[int, list[str], int]] = []

    def progress(done, records) -> bool:
        calls.append((done, [r.request_id for r in records], len(engine.requests)))
        return False

    result = replay(engine, burst(8, output_tokens=6), progress=progress, report_every=2)
    assert result.stopped_early
    assert calls == [(2, ["r0", "r1"], 6)]  # r2..r7 were still in the engine when it stopped
    assert [r.request_id for r in result.records] == ["r0", "r1"]
    assert_empty(engine)


def test_a_stop_is_final_even_when_more_requests_finish_in_the_same_step():
    answers = iter([False, True, True, True])  # a later "keep going" must not undo the stop
    calls: list[int] = []

    def progress(done, records) -> bool:
        calls.append(done)
        return next(answers)

    engine = tiny_engine()
    result = replay(engine, burst(8), progress=progress, report_every=2)  # all eight finish in one step
    assert (calls, result.stopped_early, len(result.records)) == ([2], True, 8)
    assert_empty(engine)


def test_progress_callback_sees_every_checkpoint_when_it_keeps_going():
    seen: list[int] = []

    def progress(done, records) -> bool:
        seen.append(done)
        return True

    result = replay(tiny_engine(), burst(6), progress=progress, report_every=2)
    assert (seen, result.stopped_early, len(result.records)) == ([2, 4, 6], False, 6)


def _generate(config: EngineConfig, prompt: list[int], params: SamplingParams):
    engine = LLMEngine(config)
    engine.add_request("g", prompt, params)
    while engine.has_unfinished_requests():
        outs = [o for o in engine.step() if o.finished]
        if outs:
            return outs[0].outputs[0]
    raise AssertionError("the request never finished")
