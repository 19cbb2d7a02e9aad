"""The host model: fitted exactly from known host times, refitted from step-log rows, and on the simulated clock."""

from __future__ import annotations

from dataclasses import replace

import pytest

from runtime import EngineConfig, SamplingParams, StepRow, refit_profile
from runtime.sim import HostModel, VirtualClock, fit_host, sim_engine
from tests.runtime.sim.sim_factories import tiny_profile
from tests.runtime.sim.test_sim_engine import Recording


def test_fit_recovers_a_known_host_model():
    points = [(n, 1.5e-3 + 4e-6 * n) for n in (1, 3, 8, 64, 200)]
    got = fit_host(points)
    assert got.const_s == pytest.approx(1.5e-3, rel=1e-9) and got.per_seq_s == pytest.approx(4e-6, rel=1e-9)
    assert got.predict(100) == pytest.approx(1.9e-3, rel=1e-9)


def test_one_sequence_count_fits_the_mean_and_nothing_fits_zero():
    assert fit_host([(4, 1e-3), (4, 3e-3)]) == HostModel(2e-3, 0.0)
    assert fit_host([]) == HostModel(0.0, 0.0)
    assert HostModel(-1e-3, 1e-6).predict(10) == 0.0  # never negative


def test_a_refit_fits_the_host_model_from_rows_that_carry_it():
    profile = tiny_profile()
    rows = [StepRow("bs16/auto/eager", 0, 0, n, 100 * n, 4e-3 + 5e-5 * n + 2e-6 * n, n, 1e-3 + 2e-6 * n)
            for n in range(1, 9)]
    refit = refit_profile(profile, rows)
    assert refit.host is not None and refit.host.const_s == pytest.approx(1e-3) and \
        refit.host.per_seq_s == pytest.approx(2e-6)
    assert refit.profile.host == tuple(refit.host)
    assert "host time per step 1.000 ms + 2.00 us per scheduled sequence (from 8 steps)" in refit.profile.notes[-1]
    plain = refit_profile(profile, [tuple(r[:6]) for r in rows])  # rows without host times (older logs)
    assert plain.host is None and plain.profile.host == (0.0, 0.0)


def _burst_clock(host: tuple[float, float], overlapped: bool = False) -> tuple[float, int, int]:
    """A burst (all arrivals at 0, so no decision depends on time) on a simulated engine: (clock, steps, rows)."""
    config = EngineConfig.from_flat("tiny", device="cpu", device_memory_gb=0.05, max_model_len=512,
                                    max_num_batched_tokens=256, max_num_seqs=8, block_size=16,
                                    async_scheduling=overlapped)
    clock = VirtualClock()
    engine = sim_engine(config, replace(tiny_profile(), host=host), clock)
    for i in range(6):
        engine.add_request(f"r{i}", [3 + i] * (40 + 30 * i), SamplingParams(max_tokens=20 + i, ignore_eos=True))
    engine.runner = Recording(engine.runner)
    while engine.has_unfinished_requests():
        engine.step()
    return clock(), len(engine.runner.steps), sum(len(step) for step in engine.runner.steps)


def test_the_simulated_clock_adds_the_host_model_per_step():
    bare, steps, rows = _burst_clock((0.0, 0.0))
    hosted, steps2, rows2 = _burst_clock((1e-3, 1e-5))
    assert (steps, rows) == (steps2, rows2) and steps > 0
    assert hosted - bare == pytest.approx(1e-3 * steps + 1e-5 * rows, rel=1e-9)


def test_under_async_scheduling_a_simulated_step_takes_the_longer_of_host_and_device():
    bare, steps, rows = _burst_clock((0.0, 0.0), overlapped=True)
    assert bare == _burst_clock((0.0, 0.0))[0]  # no host time: the same clock either way
    slow_host, steps2, rows2 = _burst_clock((1.0, 1e-5), overlapped=True)  # every step's host time is the longer
    assert (steps, rows) == (steps2, rows2)
    assert slow_host == pytest.approx(1.0 * steps + 1e-5 * rows, rel=1e-9)
    fast_host = _burst_clock((1e-9, 0.0), overlapped=True)[0]  # every step's device time is the longer
    assert fast_host == pytest.approx(bare, rel=1e-12)
