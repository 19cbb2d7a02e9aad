"""The baseline: vLLM's `vllm serve` defaults on the device for the shared knobs, or the runtime as composed."""

from __future__ import annotations

import pytest

from tuner.config import load_app_config
from tuner.measure.job import Hardware
from tuner.search.baseline import baseline_config
from tuner.search.space import SearchSpace

H200 = Hardware("cuda", "NVIDIA H200", 139.8, "1 x NVIDIA H200", "torch 2.11")
CPU = Hardware("cpu", "CPU x86_64 x 2 cores", None, "CPU x86_64 x 2 cores", "torch 2.13")


@pytest.fixture
def app(compose, tmp_path):
    traffic = tmp_path / "t.jsonl"
    traffic.write_text("{}\n")
    return lambda *overrides: load_app_config(compose(f"traffic={traffic}", *overrides))


def _baseline(app, hardware: Hardware):
    space = SearchSpace.from_config(app.search, app.runtime.inert_fields(hardware.device_type))
    return baseline_config(app, hardware, space)


def test_vllm_defaults_on_an_h200(app):
    config, source = _baseline(app("runtime.scheduler.max_model_len=4096"), H200)
    assert (config.cache.block_size, config.cache.gpu_memory_utilization) == (16, 0.92)
    assert (config.scheduler.max_num_seqs, config.scheduler.max_num_batched_tokens) == (1024, 8192)
    assert config.cache.enable_prefix_caching and config.scheduler.enable_chunked_prefill
    assert config.kernel.cuda_graphs is None  # graphs wherever they run: on, on a CUDA engine with one tier
    assert config.scheduler.max_model_len == 4096  # what the user composed stays
    assert source.startswith("vLLM 0.33.0, device class H100")


def test_vllm_defaults_on_cpu(app):
    config, source = _baseline(app(), CPU)
    assert (config.cache.block_size, config.scheduler.max_num_seqs, config.scheduler.max_num_batched_tokens) == (
        128, 128, 2048)
    assert source.startswith("vLLM 0.33.0, device class CPU")


def test_runtime_baseline_is_the_composed_config(app):
    composed = app("baseline=runtime", "runtime.scheduler.max_num_seqs=48")
    config, source = _baseline(composed, H200)
    assert config == composed.runtime and source == "the composed runtime config (baseline=runtime)"


def test_a_frozen_knob_holds_for_the_baseline_too(app):
    config, _ = _baseline(app("search.params.gpu_memory_utilization.freeze=0.8"), H200)
    assert config.cache.gpu_memory_utilization == 0.8
