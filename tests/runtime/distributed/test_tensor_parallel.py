"""Tensor parallelism on CPU (gloo): the same greedy tokens as one device, a dead rank stops the engine with
one error and no rank left behind, the degree checked against the model's heads."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from runtime.config import ConfigError, EngineConfig
from runtime.distributed.ranks import RankFailedError
from runtime.limits import check_tensor_parallel, engine_limits
from runtime.model.info import model_info
from tests.conftest import prompt_set
from tests.factories import assert_drained, greedy, hf_greedy, make_llm, process_alive

# swaps, preemptions, copy-on-write and prefix hits all reach the ranks (tests/runtime/test_greedy_equality.py)
SWAPPING = dict(block_size=4, max_model_len=64, num_gpu_blocks_override=16, preemption_mode="swap", swap_space=0.01)


@pytest.fixture(scope="module")
def tp2(llama_dir):
    llm = make_llm(llama_dir, tensor_parallel_size=2, **SWAPPING)
    yield llm
    llm.engine.runner.close()


def test_tp2_greedy_equals_transformers(tp2, llama_dir):
    outs = tp2.generate(prompt_set(), greedy(10), use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outs] == hf_greedy(llama_dir, prompt_set(), 10)
    assert sum(o.metrics.num_preemptions for o in outs) > 0
    assert tp2.engine.runner.paths == {"eager": tp2.engine.runner.paths["eager"]}
    assert_drained(tp2)


def test_tp2_shards_kv_heads_and_vocabulary(tp2):
    model = tp2.engine.model
    assert model.layout == (2, 1, 16)  # the tiny checkpoint: 2 layers, 2 KV heads of 16 -> 1 per rank
    assert tuple(model.lm_head.weight.shape) == (256, 64)  # half of a 512-token vocabulary, hidden 64
    assert tp2.engine.runner.caches[0].k.shape[-2] == 1


def test_killed_rank_stops_the_engine_and_every_rank(llama_dir):
    llm = make_llm(llama_dir, tensor_parallel_size=2, **SWAPPING)
    rank1 = llm.engine.runner.ranks.procs[0]
    os.kill(rank1.pid, signal.SIGKILL)
    with pytest.raises(RankFailedError, match=r"tensor-parallel rank 1 \(pid \d+\) was killed by SIGKILL; the "
                                              "engine stopped"):
        llm.generate(prompt_set(), greedy(4), use_tqdm=False)
    with pytest.raises(RankFailedError, match="stopped by an earlier error"):
        llm.generate(prompt_set(), greedy(4), use_tqdm=False)
    assert not rank1.is_alive()


@pytest.mark.slow
def test_ranks_exit_when_rank0_dies(llama_dir):
    """Rank 0's process killed outright (no finalizer runs): the other rank sees its pipe close and exits."""
    script = textwrap.dedent(f"""
        import os, signal
        from tests.factories import make_llm
        if __name__ == "__main__":
            llm = make_llm({str(llama_dir)!r}, tensor_parallel_size=2)
            print(llm.engine.runner.ranks.procs[0].pid, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    pid = int(done.stdout.split()[0])
    deadline = time.monotonic() + 10
    while process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not process_alive(pid)


@pytest.mark.slow
def test_tp2_qwen2_bias_and_tied_head(qwen2_dir):
    llm = make_llm(qwen2_dir, tensor_parallel_size=2, block_size=8)
    outs = llm.generate(prompt_set(), greedy(10), use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outs] == hf_greedy(qwen2_dir, prompt_set(), 10)
    llm.engine.runner.close()


@pytest.mark.slow
def test_tp3_smollm2_equals_tp1(smollm2_llm):
    """SmolLM2-135M has 9 query and 3 KV heads: 3 ranks (2 cannot split them)."""
    prompts = ["The capital of France is", "def fibonacci(n):"]
    one = smollm2_llm.generate(prompts, greedy(16), use_tqdm=False)
    llm = make_llm("smollm2-135m", dtype="float32", device_memory_gb=1.0, max_model_len=1024,
                   tensor_parallel_size=3)
    three = llm.generate(prompts, greedy(16), use_tqdm=False)
    assert [o.outputs[0].token_ids for o in three] == [o.outputs[0].token_ids for o in one]
    llm.engine.runner.close()


def test_tensor_parallel_size_must_be_positive():
    with pytest.raises(ConfigError, match=r"^tensor_parallel_size: must be >= 1, got 0$"):
        EngineConfig.from_flat("tiny", tensor_parallel_size=0)


def test_tensor_parallel_size_must_divide_the_heads():
    config = EngineConfig.from_flat("tiny", tensor_parallel_size=4)  # 4 query heads, 2 KV heads
    with pytest.raises(ConfigError, match=r"^tensor_parallel_size \(4\) must divide the model's KV heads \(2\); "
                                          r"tiny can be split over \[1, 2\]$"):
        engine_limits(config, model_info("tiny"))


def test_smollm2_cannot_split_over_two():
    smollm2 = model_info("tiny")._replace(name="smollm2-135m", num_heads=9, num_kv_heads=3, intermediate_size=1536)
    with pytest.raises(ConfigError, match=r"query heads \(9\); smollm2-135m can be split over \[1, 3\]"):
        check_tensor_parallel(2, smollm2)


def test_bad_degree_is_refused_before_any_rank_starts():
    with pytest.raises(ConfigError, match="tensor_parallel_size"):
        make_llm("tiny", tensor_parallel_size=4)
