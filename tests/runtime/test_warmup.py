"""The warm-up a GPU engine runs before it reports ready: every round's requests finish, and the engine
it leaves behaves as a new one (empty pool and prefix cache, fresh totals, the same tokens)."""

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
