"""Shared fixtures: tiny random Hugging Face checkpoints on disk and their transformers greedy outputs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.factories import hf_greedy, save_tiny_checkpoint

# Tiny models: one intra-op thread is faster than two fighting over small GEMMs (and CI has 2 cores).
torch.set_num_threads(1)


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


def prompt_set() -> list[list[int]]:
    """Varied lengths; the last two share a 24-token prefix with the first."""
    gen = torch.Generator().manual_seed(1)
    draw = lambda n: torch.randint(3, 500, (n,), generator=gen).tolist()
    base = draw(30)
    return [base, draw(1), draw(7), draw(16), draw(45), base[:24] + draw(9), base[:24] + draw(3)]
