"""The sampler: the batched half-precision top-k path against the per-row fp32 path."""

from __future__ import annotations

import torch

from runtime import LLM, SamplingParams
from runtime.sampler import Sampler, filter_logits, topk_survivors

VOCAB = 1000


def distinct_logits(rows: int, seed: int) -> torch.Tensor:
    """fp32 logits that fp16 holds exactly, all distinct (as a bf16 model's are): selection is exact."""
    gen = torch.Generator().manual_seed(seed)
    return torch.stack([(torch.randperm(VOCAB, generator=gen) - VOCAB // 2).float() / 16 for _ in range(rows)])


PARAMS = [
    SamplingParams(temperature=0.7, top_k=1),
    SamplingParams(temperature=1.0, top_k=5),
    SamplingParams(temperature=1.3, top_k=50),
    SamplingParams(temperature=0.9, top_k=50, top_p=0.8),
    SamplingParams(temperature=2.0, top_k=VOCAB, top_p=0.5),
]


def test_survivors_match_the_fp32_filter():
    logits = distinct_logits(len(PARAMS), seed=0)
    probs, ids = topk_survivors(logits, PARAMS)
    assert probs.shape == ids.shape == (len(PARAMS), VOCAB)  # K is the largest top_k
    for row, params in enumerate(PARAMS):
        expected = filter_logits(logits[row], params).softmax(-1)
        got = torch.zeros(VOCAB).scatter(0, ids[row], probs[row])
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-7)
        kept = int((probs[row] > 0).sum())
        assert kept == int((expected > 0).sum()) and kept <= params.top_k
    assert ids[0, 0] == logits[0].argmax() and probs[0, 0] == 1.0 and probs[0, 1:].sum() == 0


def test_survivors_clamp_logits_beyond_fp16_range():
    logits = distinct_logits(1, seed=1)
    logits[0, 7] = 1e6  # overflows fp16 to inf without the clamp; still the top candidate
    logits[0, 8] = -1e6
    probs, ids = topk_survivors(logits, [SamplingParams(top_k=3)])
    assert ids[0, 0] == 7 and probs[0, 0] == 1.0 and not torch.isnan(probs).any()


def test_half_topk_draws_are_seeded_per_sequence_and_stay_in_the_top_k():
    logits = distinct_logits(4, seed=2)
    params = SamplingParams(temperature=1.0, top_k=8)
    greedy = SamplingParams(temperature=0.0)
    plain = SamplingParams(temperature=1.0)  # no top-k: the per-row fp32 path
    alone = [Sampler(half_topk=True).sample(logits[:1], [[(5, 123, params)]])[0][0] for _ in range(3)]
    assert len(set(alone)) == 1  # same seed, same draw
    crowd = Sampler(half_topk=True).sample(
        logits[[3, 0, 1, 2]], [[(9, 1, greedy)], [(5, 123, params)], [(6, 2, plain)], [(7, 3, params), (8, 4, params)]])
    assert crowd[1] == [alone[0]]  # the crowd around it does not change a seeded draw
    assert crowd[0] == [int(logits[3].argmax())]
    top8 = set(logits[0].topk(8).indices.tolist())
    sampler = Sampler(half_topk=True)
    draws = [sampler.sample(logits[:1], [[(1, 0, params)]])[0][0] for _ in range(200)]
    assert set(draws) <= top8 and len(set(draws)) > 1


def test_engine_uses_the_knob():
    prompts = [[1, 2, 3, 4, 5], [7, 8, 9]]
    params = SamplingParams(temperature=0.8, top_k=20, seed=11, max_tokens=6)

    def run(**knobs) -> list[list[int]]:
        llm = LLM(model="tiny", **knobs)
        assert llm.engine.sampler.half_topk is knobs.get("sampler_half_topk", False)
        return [r.outputs[0].token_ids for r in llm.generate(prompts, params, use_tqdm=False)]

    first, again = run(sampler_half_topk=True), run(sampler_half_topk=True)
    assert first == again and all(len(t) == 6 for t in first)
