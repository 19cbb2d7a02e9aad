"""Piecewise graphs' plumbing on the CPU: the model run in pieces through the static buffers, with the
attention between them, gives exactly the tokens of the plain forward (fp32). The capture itself runs on
a GPU (tests/runtime/test_gpu_runtime.py)."""

from __future__ import annotations

import pytest
import torch

from runtime.config import KernelConfig
from runtime.limits import piecewise_buckets, piecewise_graphs_on
from runtime.piecewise import PiecewiseGraphs
from tests.factories import greedy, make_llm


def _prompts() -> list[list[int]]:
    gen = torch.Generator().manual_seed(3)
    return [torch.randint(3, 500, (n,), generator=gen).tolist() for n in (5, 37, 90, 13, 61)]


TIERS = [{"max_len": 64, "block_size": 8, "share": 0.5}, {"max_len": 160, "block_size": 16, "share": 0.5}]


@pytest.mark.parametrize("async_scheduling", [False, True])
@pytest.mark.parametrize("tiers", [None, TIERS])
def test_pieces_give_the_tokens_of_the_plain_forward(llama_dir, tiers, async_scheduling):
    # chunks split across steps: mixed steps; under async scheduling their decode rows take the previous step's
    # tokens on the device
    knobs = dict(max_num_batched_tokens=48, max_model_len=160, async_scheduling=async_scheduling)
    if tiers:
        knobs["block_tiers"] = tiers
    plain = make_llm(llama_dir, **knobs)
    expected = [o.outputs[0].token_ids for o in plain.generate(prompt_token_ids=_prompts(), sampling_params=greedy(9),
                                                                use_tqdm=False)]
    pieces = make_llm(llama_dir, **knobs)
    runner = pieces.engine.runner
    runner.piecewise = PiecewiseGraphs(runner.model, 64, torch.device("cpu"), use_triton=False, capture=False)
    got = [o.outputs[0].token_ids for o in pieces.generate(prompt_token_ids=_prompts(), sampling_params=greedy(9),
                                                           use_tqdm=False)]
    assert got == expected
    assert runner.paths["piecewise"] > 0 and runner.paths["eager"] == 0  # every step fit a bucket of <= 64


def test_buckets_and_when_pieces_are_captured():
    assert piecewise_buckets(512) == [8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448,
                                      512]
    assert piecewise_buckets(100) == [8, 16, 24, 32, 48, 64, 80, 96, 112]  # the last holds 100
    graphs = PiecewiseGraphs.__new__(PiecewiseGraphs)
    graphs.sizes = piecewise_buckets(100)
    assert [graphs.bucket(n) for n in (0, 1, 8, 9, 100, 112, 113)] == [None, 8, 8, 16, 112, 112, None]
    assert piecewise_graphs_on(KernelConfig(), cuda_triton=True)
    assert not piecewise_graphs_on(KernelConfig(), cuda_triton=False)
    assert not piecewise_graphs_on(KernelConfig(cuda_graphs=False), cuda_triton=True)
    assert not piecewise_graphs_on(KernelConfig(max_cudagraph_capture_size=0), cuda_triton=True)
