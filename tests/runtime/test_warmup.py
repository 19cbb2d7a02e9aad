"""The warm-up a GPU engine runs before it reports ready: every round's requests finish, and the engine
it leaves behaves as a new one (empty pool and prefix cache, fresh totals, the same tokens); its prefill chunks
are the compositions it means to compile."""

from __future__ import annotations

from runtime import EngineConfig, LLMEngine, SamplingParams
from runtime.warmup import warm_up


def _engine() -> LLMEngine:
    return LLMEngine(EngineConfig.from_flat("tiny", device="cpu", device_memory_gb=0.05, debug_integrity=True,
                                            split_kv_min_len=256))


def _tokens(engine: LLMEngine) -> list[int]:
    engine.add_request("a", list(range(5, 40)), SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True))
    out = []
    while engine.has_unfinished_requests():
        out += [o.outputs[0].token_ids for o in engine.step() if o.finished]
    return out[0]


def test_warm_up_leaves_a_fresh_engine():
    warmed, fresh = _engine(), _engine()
    warm_up(warmed)
    assert not warmed.has_unfinished_requests() and warmed.requests == {}
    assert sum(p.num_used for p in warmed.kv.pools) == 0
    assert warmed.last_step is None and warmed.totals.steps == 0
    assert _tokens(warmed) == _tokens(fresh)


def test_warm_up_runs_its_chunks_fresh_and_one_after_a_prefix(monkeypatch):
    """(start, tokens) of every prefill chunk: rounds 1-3 fresh (no prompt hits the prefix cache, which would
    shorten a chunk), round 4 a prompt of the budget (2,048) + 2 tokens, whose 2-token chunk sits after 2,048
    cached (the flash kernel's prefixed launch). The long prompt: split_kv_min_len + 100."""
    engine = _engine()
    chunks, schedule = [], engine.scheduler.schedule

    def spy():
        out = schedule()
        chunks.extend((s.start, s.num_new_tokens) for s in out.scheduled if s.num_new_tokens > 1)
        return out

    monkeypatch.setattr(engine.scheduler, "schedule", spy)
    warm_up(engine)
    assert chunks == [(0, 3), (0, 17), (0, 100), (0, 600), (0, 356), (0, 356), (0, 17), (0, 2048), (2048, 2)]
