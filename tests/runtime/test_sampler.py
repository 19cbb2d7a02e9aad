"""The sampler: the batched half-precision top-k path against the per-row fp32 path."""

from __future__ import annotations

import torch

from runtime import LLM, LLMEngine, SamplingParams
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


def test_logprobs_come_with_the_same_tokens_and_match_a_log_softmax():
    """Greedy, per-row fp32 and batched top-k draws give the tokens `sample` gives (same seeds); the sequences that
    ask get their token's raw log-probability and the top-k, exactly a log_softmax's; the others get None."""
    logits = distinct_logits(3, seed=4)
    asks = [SamplingParams(temperature=0.0, logprobs=3), SamplingParams(temperature=0.9, seed=1, logprobs=0),
            SamplingParams(temperature=0.8, top_k=20, logprobs=5)]
    rows = [[(0, 7, asks[0]), (1, 7, SamplingParams(temperature=0.0))], [(2, 8, asks[1])], [(3, 9, asks[2])]]
    for half_topk in (False, True):
        expected = Sampler(half_topk).sample(logits, rows)
        tokens, logprobs = Sampler(half_topk).sample_with_logprobs(logits, rows)
        assert tokens == expected
        assert logprobs[0][1] is None
        lsm = logits.log_softmax(-1)
        for (i, j, k) in ((0, 0, 3), (1, 0, 0), (2, 0, 5)):
            lp = logprobs[i][j]
            top = lsm[i].topk(k)
            assert lp.token_id == tokens[i][j] and lp.logprob == lsm[i, lp.token_id].item()
            assert (lp.top_ids, lp.top_logprobs) == (tuple(top.indices.tolist()), tuple(top.values.tolist()))
        assert logprobs[0][0].logprob == logprobs[0][0].top_logprobs[0] == lsm[0].max().item()  # greedy: the max


def test_engine_logprobs_are_the_recorded_distribution_at_the_drawn_tokens():
    """A greedy request's logprobs are the engine's recorded log_softmax at its tokens; beside it n = 2 sampled
    ones get theirs for their own tokens, and a request that did not ask gets None."""
    llm = LLM(model="tiny", device="cpu")
    engine = LLMEngine(llm.config, model=llm.engine.model, record_logprobs=True)
    engine.add_request("g", [1, 2, 3], SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True, logprobs=2))
    engine.add_request("s", [4, 5], SamplingParams(temperature=1.0, seed=3, n=2, max_tokens=4, ignore_eos=True,
                                                   logprobs=1))
    engine.add_request("none", [6], SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True))
    outs = {}
    while engine.has_unfinished_requests():
        outs |= {o.request_id: o for o in engine.step() if o.finished}
    assert outs["none"].outputs[0].logprobs is None
    for rid, k in (("g", 2), ("s", 1)):
        for c in outs[rid].outputs:
            assert [lp.token_id for lp in c.logprobs] == c.token_ids and all(len(lp.top_ids) == k for lp in c.logprobs)
            assert all(lp.logprob <= lp.top_logprobs[0] for lp in c.logprobs)
    greedy_out = outs["g"].outputs[0]
    recorded = [row[t].item() for row, t in zip(engine.logprobs["g"], greedy_out.token_ids)]
    assert [lp.logprob for lp in greedy_out.logprobs] == recorded
    assert [lp.logprob for lp in outs["g"].outputs[0].logprobs] == [lp.top_logprobs[0]
                                                                   for lp in outs["g"].outputs[0].logprobs]


def test_deferred_draws_are_the_host_draws():
    """`sample_deferred` (async scheduling) draws each token `sample` draws, from the same generators, on the device."""
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(4, VOCAB, generator=gen) * 3
    params = [SamplingParams(temperature=0.0), SamplingParams(temperature=0.8), PARAMS[3], PARAMS[4]]
    rows = [[(0, 11, params[0])], [(1, 12, params[1]), (2, 13, params[1])], [(3, 14, params[2])],
            [(4, 15, params[3])]]  # row 1: two samples of one request (n=2) draw from it
    host, device = Sampler(), Sampler()
    for _ in range(30):
        expected = [token for row in host.sample(logits, rows) for token in row]
        assert device.sample_deferred(logits, rows).tolist() == expected
    assert Sampler(half_topk=True).sample_deferred(logits, rows) is None  # a batched top-k row draws on the host
