"""The simulated engine decides as the real one: same batches, preemptions and finish order for the same step times.

A real tiny-model engine on CPU and a simulated one run the same requests on virtual clocks that advance
by the same step-time model (the real engine's runner computes, then the clock moves by the prediction).
"""

from __future__ import annotations

import pytest

from runtime import ConfigError, EngineConfig, LLMEngine, SamplingParams
from runtime.sim import VirtualClock, sim_engine, sim_memory
from runtime.sim.shape import StepShaper
from tests.runtime.sim.sim_factories import tiny_profile

KNOBS = dict(device="cpu", device_memory_gb=0.009, max_model_len=512, max_num_batched_tokens=256, max_num_seqs=8,
             block_size=16, debug_integrity=True)
SHARED = list(range(100, 164))  # a 64-token prefix (four full blocks) that requests 0, 3 and 6 share


def requests() -> list[tuple[str, float, list[int], int]]:
    """(id, arrival, prompt, max_tokens): ten requests whose working set outgrows the pool."""
    out = []
    for i in range(10):
        own = [(i * 37 + k) % 2000 + 3 for k in range(60 + 25 * i)]
        prompt = SHARED + own if i % 3 == 0 else own
        out.append((f"r{i}", 0.004 * i, prompt, 40 + 9 * i))
    return out


class Recording:
    """A runner wrapper: keeps each step's (seq_id, start, new tokens), then lets `after` move the clock."""

    def __init__(self, inner, after=None) -> None:
        self.inner, self.after, self.steps = inner, after, []

    def execute(self, out):
        self.steps.append(tuple((s.seq.seq_id, s.start, s.num_new_tokens) for s in out.scheduled))
        result = self.inner.execute(out)
        if self.after is not None:
            self.after(out)
        return result


def drive(engine: LLMEngine, clock: VirtualClock) -> tuple[list, list, list[str], dict]:
    """Open loop as the tuner's replay: arrivals at their times, idle gaps skipped. Returns the steps, the
    preemptions per step, the finish order and each request's timestamps."""
    pending = sorted(requests(), key=lambda r: r[1])
    preempted, finished, times = [], [], {}
    while pending or engine.has_unfinished_requests():
        while pending and pending[0][1] <= clock():
            rid, arrival, prompt, max_tokens = pending.pop(0)
            engine.add_request(rid, prompt, SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True),
                               arrival_time=arrival)
        if not engine.has_unfinished_requests():
            clock.jump_to(pending[0][1])
            continue
        for out in engine.step():
            if out.finished:
                finished.append(out.request_id)
                m = out.metrics
                times[out.request_id] = (m.first_scheduled_time, m.first_token_time, m.finished_time,
                                         len(out.outputs[0].token_ids), m.num_preemptions, m.num_cached_tokens)
        preempted.append(engine.last_step.num_preempted)
    return engine.runner.steps, preempted, finished, times


def real_engine(config: EngineConfig, profile, clock: VirtualClock) -> LLMEngine:
    engine = LLMEngine(config, clock=clock)
    model, shaper = profile.step_model, StepShaper(config, engine.kv.tiers, engine.runner.graphs is not None)
    engine.runner = Recording(engine.runner,
                              lambda out: clock.advance(model.predict_tiers(shaper.parts(out.scheduled))))
    return engine


def simulated_engine(config: EngineConfig, profile, clock: VirtualClock) -> LLMEngine:
    engine = sim_engine(config, profile, clock)
    engine.runner = Recording(engine.runner)
    return engine


@pytest.mark.parametrize("knobs", [{}, {"preemption_mode": "swap", "swap_space": 0.01},
                                   {"block_tiers": [{"max_len": 256, "block_size": 8, "share": 0.4},
                                                    {"max_len": 512, "block_size": 16, "share": 0.6}]}],
                         ids=["recompute", "swap", "tiers"])
def test_real_and_simulated_engines_make_the_same_decisions(knobs):
    config = EngineConfig.from_flat("tiny", **{**KNOBS, **knobs})
    profile = tiny_profile(device_type="cpu")  # as the CPU engine: no decode graphs
    real_clock, sim_clock = VirtualClock(), VirtualClock()
    real = drive(real_engine(config, profile, real_clock), real_clock)
    sim = drive(simulated_engine(config, profile, sim_clock), sim_clock)
    steps, preempted, finished, times = real
    assert sum(preempted) > 0  # the pool is small enough to preempt: the test exercises it
    assert steps == sim[0]
    assert preempted == sim[1]
    assert finished == sim[2]
    assert times == sim[3]
    assert real_clock() == sim_clock()


def test_the_simulated_pool_is_the_real_engines_pool():
    config = EngineConfig.from_flat("tiny", **KNOBS)
    real = LLMEngine(config)
    simulated = sim_engine(config, tiny_profile(), VirtualClock())
    assert simulated.kv.tiers == real.kv.tiers
    assert real.kv.tiers[0].num_blocks == 75
    assert (simulated.max_model_len, simulated.scheduler.budget) == (512, 256)


def test_the_pool_is_sized_from_the_profiled_gpu_memory_without_a_configured_one():
    config = EngineConfig.from_flat("tiny", max_model_len=512, max_num_batched_tokens=256, max_num_seqs=8)
    _, _, plan = sim_memory(config, tiny_profile(memory_gb=2.0))
    # 0.9 x 2 GiB - 4461056 weight bytes - (256 x 6144 + 8 x 24576) activation bytes, in 32 KiB blocks (tiny, fp32)
    assert plan.num_blocks == ((int(0.9 * 2 * (1 << 30)) - 4_461_056 - 1_769_472) // 32_768,)


def test_simulated_outputs_stop_at_max_tokens_and_time_is_the_models():
    clock = VirtualClock()
    engine = sim_engine(EngineConfig.from_flat("tiny", **KNOBS), tiny_profile(), clock)
    engine.add_request("a", list(range(3, 40)), SamplingParams(max_tokens=5, ignore_eos=False), arrival_time=0.0)
    outs = []
    while engine.has_unfinished_requests():
        outs += engine.step()
    assert [len(o.outputs[0].token_ids) for o in outs if o.finished] == [5]
    # a 37-token prefill then 4 decodes of contexts 38..41 (tiny_profile's coefficients); piecewise graphs
    # replay the prefill at their bucket of 48 tokens, priced at the eager coefficients (no piecewise variant)
    c = tiny_profile().coefficients["bs16/auto/eager"]
    prefill = c[0] + c[1] * 48 + c[2] * 37 * 37
    decodes = sum(c[0] + c[3] + c[4] * ctx for ctx in (38, 39, 40, 41))
    assert clock() == pytest.approx(prefill + decodes, rel=1e-12)


def test_a_profile_of_another_model_is_refused():
    with pytest.raises(ConfigError, match=r"model\.name: the GPU profile is of 'tiny', not 'llama-3-8b'"):
        sim_engine(EngineConfig.from_flat("llama-3-8b"), tiny_profile(), VirtualClock())
