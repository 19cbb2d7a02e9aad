"""Greedy output of the paged runtime equals transformers' `generate` (fp32, CPU), under every scheduling regime."""

from __future__ import annotations

import pytest

from tests.factories import assert_drained, greedy, make_llm

TWO_TIERS = [{"max_len": 32, "block_size": 4, "share": 0.5}, {"max_len": 256, "block_size": 16, "share": 0.5}]

REGIMES = {
    "block_size_1": dict(block_size=1),
    "block_size_16": dict(block_size=16),
    "block_size_128": dict(block_size=128),  # every sequence within one page (the TMA path's pages on Hopper)
    "two_tiers": dict(block_tiers=TWO_TIERS),
    "max_num_seqs_1": dict(block_size=8, max_num_seqs=1),
    "max_num_seqs_64": dict(block_size=8, max_num_seqs=64),
    "chunked_tiny_budget": dict(block_size=4, max_num_batched_tokens=5, enable_chunked_prefill=True),
    "no_chunking": dict(block_size=8, enable_chunked_prefill=False, max_model_len=128),
    "preempt_recompute": dict(block_size=4, max_model_len=64, num_gpu_blocks_override=16,
                              preemption_mode="recompute"),
    "preempt_swap": dict(block_size=4, max_model_len=64, num_gpu_blocks_override=16, preemption_mode="swap",
                         swap_space=0.01),
    "prefix_caching": dict(block_size=4, enable_prefix_caching=True, max_num_seqs=1),
    "pad_multiple_8": dict(block_size=8, pad_multiple=8),
}


@pytest.mark.parametrize("regime", list(REGIMES))
def test_greedy_matches_transformers(checkpoint, regime):
    folder, prompts, expected = checkpoint
    llm = make_llm(folder, **REGIMES[regime])
    outs = llm.generate(prompts, greedy(10), use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outs] == expected
    assert all(o.outputs[0].finish_reason == "length" for o in outs)
    assert_drained(llm)


def test_preemption_happens_in_both_modes(llama_dir):
    from tests.conftest import prompt_set

    for mode in ("recompute", "swap"):
        llm = make_llm(llama_dir, **REGIMES[f"preempt_{mode}"])
        outs = llm.generate(prompt_set(), greedy(10), use_tqdm=False)
        assert sum(o.metrics.num_preemptions for o in outs) > 0, mode
        assert llm.engine.totals.preempted >= 1
        assert_drained(llm)


def test_prefix_cache_hits_shared_prefix(llama_dir):
    """The last two prompts share 24 tokens (6 blocks of 4) with the first; run one at a time."""
    from tests.conftest import prompt_set

    llm = make_llm(llama_dir, **REGIMES["prefix_caching"])
    outs = llm.generate(prompt_set(), greedy(10), use_tqdm=False)
    cached = [o.metrics.num_cached_tokens for o in outs]
    assert cached == [0, 0, 0, 0, 0, 24, 24]
    hit_rate = sum(cached) / sum(len(p) for p in prompt_set())
    assert hit_rate > 0
