"""Open-loop replay on the real tiny CPU engine: queueing, arrival times, idle skip, forced lengths, a stop only
once the verdict is certain, a fresh engine for every replay."""

from __future__ import annotations

import itertools
import json
import shutil
import time

import pytest

from runtime import EngineConfig, LLMEngine, SamplingParams
from tests.tuner.tuner_factories import burst, request, tiny_engine
from tuner.config import SloConfig
from tuner.measure.replay import ReplayClock, replay
from tuner.traffic import TrafficRequest


def assert_empty(engine: LLMEngine) -> None:
    """Nothing left in the engine: no request, integrity green, no block held."""
    assert engine.requests == {}
    assert not engine.has_unfinished_requests()
    engine.check_integrity()
    assert sum(p.num_used for p in engine.kv.pools) == 0


def test_replay_clock_jumps_forward_only(monkeypatch):
    real = [100.0]
    monkeypatch.setattr("tuner.measure.replay.time.perf_counter", lambda: real[0])
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
    engine, clock = tiny_engine(scheduler={"max_num_seqs": 1})
    result = replay(engine, clock, burst(4, prompt_len=16, output_tokens=4))
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
    engine, clock = tiny_engine()
    admitted: dict[str, float] = {}
    add = engine.add_request

    def add_and_note(rid, *args, **kwargs):
        admitted[rid] = clock()  # the replay clock at the moment the request enters
        add(rid, *args, **kwargs)

    engine.add_request = add_and_note
    arrivals = [0.0, 0.02, 0.05, 0.05, 0.3, 0.31]
    traffic = [request(f"q{i}", t, 12, 3, first_id=10 + 12 * i) for i, t in enumerate(arrivals)]
    result = replay(engine, clock, traffic)
    by_id = {r.request_id: r for r in result.records}
    assert sorted(by_id) == [f"q{i}" for i in range(6)]
    for i, t in enumerate(arrivals):
        rec = by_id[f"q{i}"]
        assert rec.arrival == t  # the logged arrival, not the admission time
        assert admitted[f"q{i}"] >= t
        assert rec.first_scheduled >= t
    assert all(list(r.token_times) == sorted(r.token_times) for r in result.records)  # the clock never went back


def test_idle_gap_is_skipped_and_does_not_change_latencies():
    gap = (request("early", 0.0, 16, 4, first_id=10), request("late", 1000.0, 16, 4, first_id=100))
    alone = replay(*tiny_engine(), (request("late", 0.0, 16, 4, first_id=100),)).records[0]
    engine, clock = tiny_engine()
    start = time.perf_counter()
    result = replay(engine, clock, gap)
    wall = time.perf_counter() - start
    # The idle 1000 s were skipped, less the busy part (milliseconds; bounds loose for a loaded CI host).
    assert wall < 100.0
    assert 900.0 < clock.skipped_s < 1000.0
    assert result.busy_s < 100.0
    assert result.busy_s + clock.skipped_s >= result.duration_s > 1000.0
    late = {r.request_id: r for r in result.records}["late"]
    assert late.arrival == 1000.0
    e2e, e2e_alone = late.finished - late.arrival, alone.finished - alone.arrival
    ttft, ttft_alone = late.first_token - late.arrival, alone.first_token - alone.arrival
    assert 0.0 < ttft < 0.5 and 0.0 < e2e < 0.5  # not ~1000 s: the gap is not counted as latency
    assert e2e == pytest.approx(e2e_alone, abs=0.25) and ttft == pytest.approx(ttft_alone, abs=0.25)


def test_outputs_are_forced_to_the_logged_lengths():
    lengths = [1, 2, 7, 30]
    traffic = [request(f"n{n}", 0.01 * i, 20, n, first_id=10 + 20 * i) for i, n in enumerate(lengths)]
    result = replay(*tiny_engine(), traffic)
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
    clock = ReplayClock()
    engine = LLMEngine(EngineConfig.from_mapping(config), clock=clock)
    result = replay(engine, clock, [TrafficRequest("eos", 0.0, tuple(prompt), 8, "test:eos")])
    assert result.records[0].output_tokens == 8


def test_rejected_request_is_recorded_with_its_reason():
    engine, clock = tiny_engine()  # max_model_len 128
    traffic = [request("ok", 0.0, 16, 4), request("long", 0.0, 120, 20, first_id=100),
               request("vocab", 0.01, 16, 4, first_id=5000), request("after", 0.05, 16, 4, first_id=300)]
    result = replay(engine, clock, traffic)
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


def test_a_replay_stops_only_once_its_failure_is_certain():
    """Every request misses a 1 ms TPOT; with 3 misses the verdict is decided and the rest is not replayed."""
    engine, clock = tiny_engine(scheduler={"max_num_seqs": 1})
    strict = SloConfig(tpot_s=1e-6)
    result = replay(engine, clock, burst(8, output_tokens=6), slo=strict, stop_after_misses=3)
    assert result.stopped and [r.request_id for r in result.records] == ["r0", "r1", "r2"]
    assert result.requests == 8
    lenient = replay(engine, clock, burst(8, output_tokens=6), slo=SloConfig(), stop_after_misses=3)
    assert not lenient.stopped and len(lenient.records) == 8  # a replay meeting its SLO always runs to the end
    assert_empty(engine)


def test_every_replay_starts_from_a_reset_engine():
    """The same window twice on one engine: identical prefix hits and outputs (nothing cached carried over)."""
    engine, clock = tiny_engine()
    shared = tuple(request(f"p{i}", 1.0 * i, 32, 3, first_id=10) for i in range(4))  # one prompt, 1 s apart
    first, second = replay(engine, clock, shared), replay(engine, clock, shared)
    hits = [[(r.request_id, r.cached_tokens, r.output_tokens) for r in res.records] for res in (first, second)]
    assert hits[0] == hits[1] and sum(c for _, c, _ in hits[0]) > 0


def test_progress_sees_every_finished_request():
    engine, clock = tiny_engine()
    seen: list[int] = []
    replay(engine, clock, burst(6), progress=seen.append)
    assert seen == [1, 2, 3, 4, 5, 6]


def _generate(config: EngineConfig, prompt: list[int], params: SamplingParams):
    engine = LLMEngine(config)
    engine.add_request("g", prompt, params)
    while engine.has_unfinished_requests():
        outs = [o for o in engine.step() if o.finished]
        if outs:
            return outs[0].outputs[0]
    raise AssertionError("the request never finished")
