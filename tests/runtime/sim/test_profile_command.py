"""`python -m runtime.profile` on the tiny model on CPU (small grid): what the profile records."""

from __future__ import annotations

import pytest

from runtime import ConfigError, EngineConfig
from runtime.profile import graph_engine_steps, main, parse_args
from runtime.sim import load_profile
from runtime.sim.stepmodel import FEATURES
from runtime.step_timing import Composition, StepTimer
from tests.runtime.sim.sim_factories import TINY_WEIGHT_BYTES


@pytest.fixture(scope="module")
def tiny_profile_path(tmp_path_factory):
    out = tmp_path_factory.mktemp("profile") / "tiny.json"
    assert main(["model=tiny", "grid=small", "device=cpu", "repeats=1", f"out={out}"]) == 0
    return out


def test_the_profile_records_device_model_memory_and_fit(tiny_profile_path):
    p = load_profile(tiny_profile_path)
    assert (p.model, p.dtype, p.grid, p.device.type, p.device.memory_bytes) == ("tiny", "float32", "small", "cpu",
                                                                              1 << 30)
    assert p.info.kv_layout == (4, 2, 32)
    assert p.weight_bytes == TINY_WEIGHT_BYTES
    assert (p.activation.const_bytes, p.activation.per_token_bytes, p.activation.per_seq_bytes) == pytest.approx(
        (0.0, 6144.0, 24576.0), abs=1e-3)  # the CPU estimate is exactly linear
    assert list(p.coefficients) == ["bs16/auto/eager"]
    assert len(p.coefficients["bs16/auto/eager"]) == len(FEATURES) + 1  # the five, then the floor
    rows = p.samples["bs16/auto/eager"]
    assert len(rows) >= 20 and all(r[4] > 0 for r in rows)
    assert p.fit_error.points == len(rows) // 5
    assert p.command.startswith("python -m runtime.profile model=tiny grid=small")
    assert p.device.torch and p.created
    assert p.host_model.predict(1) > 0  # the burst's steps measured a host time per step


def test_bad_arguments_name_the_key():
    with pytest.raises(ConfigError, match="grid: must be small or full"):
        parse_args(["model=tiny", "grid=huge"])
    with pytest.raises(ConfigError, match="'blocks=16': expected key=value"):
        parse_args(["model=tiny", "blocks=16"])
    with pytest.raises(ConfigError, match="model: required"):
        parse_args(["grid=small"])
    assert parse_args(["model=tiny", "block_sizes=8,16", "kv_dtypes=auto"]).block_sizes == (8, 16)


@pytest.mark.gpu
def test_the_profile_command_on_cuda_times_graphs_and_fp8(tmp_path):
    """The small grid on the GPU: eager, full-graph and piecewise variants (the graphs engine's decodes and its
    other steps, all within the capture size), bf16 and fp8 KV, the device and its versions."""
    out = tmp_path / "tiny-cuda.json"
    assert main(["model=tiny", "grid=small", "graphs=both", "kv_dtypes=auto,fp8_e4m3", f"out={out}"]) == 0
    p = load_profile(out)
    assert p.device.type == "cuda" and p.device.memory_bytes > 0 and p.device.cuda and p.dtype == "bfloat16"
    assert sorted(p.coefficients) == ["bs16/auto/eager", "bs16/auto/graph", "bs16/auto/piecewise",
                                      "bs16/fp8_e4m3/eager", "bs16/fp8_e4m3/graph", "bs16/fp8_e4m3/piecewise"]
    assert [n for n in p.notes if not n.startswith("tier_s")] == []  # every variant timed, the tiers too
    assert p.tier_s > 0
    assert p.activation.per_token_bytes > 0


def test_the_profile_records_a_tier_cost_from_steps_over_two_tiers(tiny_profile_path):
    p = load_profile(tiny_profile_path)
    assert p.tier_s >= 0  # the tiny model's second tier costs about nothing on a CPU: its noise decides
    assert [n for n in p.notes if n.startswith("tier_s")] == [
        f"tier_s {p.tier_s * 1e3:.2f} ms: a tier past the first, from 7 steps over two tiers"]


def test_a_known_tier_cost_is_measured(monkeypatch, tmp_path):
    """Every tier past the first made to cost 100 ms more: the profile's tier_s finds it, to 15% (the tiny model's
    steps of 2-14 ms on the CPU swing by tens of ms on a loaded machine: a 20 ms cost was lost in that)."""
    timed = StepTimer._run

    def slower(self, out):
        return timed(self, out) + 0.100 * (len({s.seq.tier for s in out.scheduled}) - 1)

    monkeypatch.setattr(StepTimer, "_run", slower)
    out = tmp_path / "tiers.json"
    assert main(["model=tiny", "grid=small", "device=cpu", "repeats=1", f"out={out}"]) == 0
    assert load_profile(out).tier_s == pytest.approx(0.100, abs=0.015)


def test_a_graphs_engine_times_decodes_and_the_steps_its_piecewise_graphs_hold():
    comps = [Composition(decodes=(100,) * 8), Composition(chunks=((0, 60),)), Composition(chunks=((0, 61),)),
             Composition(decodes=(50,), chunks=((0, 64),)), Composition(chunks=((0, 200),))]
    kernel = EngineConfig.from_flat("tiny", max_cudagraph_capture_size=64, pad_multiple=8).kernel
    # 60 tokens pad to 64 (held), 61 and 65 to 64 and 72: the 65 one and the 200 one run eagerly
    assert graph_engine_steps(comps, kernel, piecewise=True) == comps[:3]
    assert graph_engine_steps(comps, kernel, piecewise=False) == comps[:1]  # decode graphs alone
