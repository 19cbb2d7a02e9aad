"""Tensor parallelism on CUDA (NCCL): the same code as gloo's, its group and collectives on one GPU, and on two
(when two are lent) the same greedy tokens as one GPU in fp32 and a killed rank stopping the engine."""

from __future__ import annotations

import os
import signal

import pytest
import torch

from runtime import LLM
from runtime.distributed.group import RankGroup, host_store
from runtime.distributed.ranks import RankFailedError
from tests.conftest import prompt_set
from tests.factories import greedy

pytestmark = pytest.mark.gpu
two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")


def test_an_nccl_group_of_one_reduces_and_gathers():
    group = RankGroup(host_store(1), 0, 1, torch.device("cuda", 0))
    t = torch.arange(6, dtype=torch.bfloat16, device="cuda").view(2, 3)
    assert group.backend == "nccl"
    assert group.all_reduce(t.clone()).tolist() == t.tolist()
    assert group.all_gather(t).tolist() == t.tolist()


@two_gpus
def test_tp2_over_nccl_equals_one_gpu_in_fp32():
    one = LLM("tiny", dtype="float32").generate(prompt_token_ids=prompt_set(), sampling_params=greedy(16),
                                                use_tqdm=False)
    llm = LLM("tiny", dtype="float32", tensor_parallel_size=2)
    two = llm.generate(prompt_token_ids=prompt_set(), sampling_params=greedy(16), use_tqdm=False)
    assert [o.outputs[0].token_ids for o in two] == [o.outputs[0].token_ids for o in one]
    assert os.environ["NCCL_NVLS_ENABLE"] == "0"
    llm.engine.runner.close()


@two_gpus
def test_a_killed_rank_stops_an_nccl_engine():
    llm = LLM("tiny", tensor_parallel_size=2)
    rank1 = llm.engine.runner.ranks.procs[0]
    os.kill(rank1.pid, signal.SIGKILL)
    with pytest.raises(RankFailedError, match=r"tensor-parallel rank 1 \(pid \d+\) was killed by SIGKILL"):
        llm.generate(prompt_token_ids=prompt_set(), sampling_params=greedy(4), use_tqdm=False)
    assert not rank1.is_alive()
