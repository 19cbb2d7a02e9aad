"""The quality guardrail for numerics knobs: the candidate against itself with those knobs neutral."""

from __future__ import annotations

import pytest
import torch

from runtime import EngineConfig, WeightCache, load_tokenizer, sampling_probs
from tuner.config import QualityConfig
from tuner.executors.probes import TASKS, TEXTS, answered, probe_prompts
from tuner.executors.quality import SAMPLING, compare, run_probe

PROBE = QualityConfig(probe_size=4, probe_max_tokens=8)


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    return WeightCache().get(_config())[0]


def _config(**knobs) -> EngineConfig:
    return EngineConfig.from_flat("tiny", device="cpu", device_memory_gb=0.05, max_model_len=256, **knobs)


def test_quality_of_the_reference_itself_is_perfect(tiny):
    probe = run_probe(_config(), tiny, PROBE)
    result = compare(probe, run_probe(_config(block_size=4), tiny, PROBE))  # block size does not change numerics
    assert (result.token_agreement, result.mean_kl) == (1.0, 0.0)
    assert result.violation(PROBE) < 0


def test_hard_clipping_breaks_a_strict_guardrail(tiny):
    """Random weights attend almost uniformly, so clipping moves the distributions only a little: a strict
    KL threshold shows the mechanism (the identical config above measures exactly 0)."""
    strict = QualityConfig(probe_size=4, probe_max_tokens=8, max_mean_kl=1e-9)
    clipped = _config(qk_clip=0.01)
    result = compare(run_probe(clipped.numerics_neutral(), tiny, strict), run_probe(clipped, tiny, strict))
    assert result.mean_kl > 1e-9
    assert result.margins(strict)["mean KL"] == result.mean_kl - 1e-9 > 0
    assert result.violation(strict) > 0 and "mean KL" in result.describe(strict)


def test_answers_match_whole_words_only():
    assert answered("The answer to this classic math problem is 4.", ("4", "four"))
    assert not answered("6 * 7 = 42", ("4",))
    assert not answered("It is 1.4 metres", ("4",))
    assert answered("the capital of France is paris", ("Paris",))
    assert answered("Plants absorb carbon dioxide, nitrogen", ("carbon dioxide",))


def test_probe_prompts_are_the_tasks_first_then_texts_through_the_encoder():
    prompts = probe_prompts(QualityConfig(probe_size=21), 100, lambda text: [len(text)])
    assert [p.token_ids for p in prompts[:2]] == [[len(TASKS[0][0])], [len(TASKS[1][0])]]
    assert [p.answers for p in prompts[:2]] == [("Paris",), ("Tokyo",)]
    assert [p.answers for p in prompts[19:]] == [None, None]
    assert prompts[19].token_ids == [len(TEXTS[0])]


def test_probe_prompts_without_a_tokenizer_are_seeded_ids():
    a, b = probe_prompts(PROBE, 50, None), probe_prompts(PROBE, 50, None)
    assert a == b and [p.answers for p in a] == [None] * 4
    assert all(3 <= t < 50 for p in a for t in p.token_ids)


def test_half_topk_draws_from_the_per_row_distribution_on_bf16_logits():
    """Distinct bf16 logits are exact in fp16, so both sampler paths draw from the same distribution."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.stack([torch.randperm(500, generator=gen) for _ in range(3)]).float().sub(250).div(4)  # [3, 500]
    assert torch.equal(logits, logits.to(torch.bfloat16).float())
    full = sampling_probs(logits, SAMPLING, half_topk=False)
    half = sampling_probs(logits, SAMPLING, half_topk=True)
    assert torch.allclose(full, half, atol=1e-6)
    assert ((full > 0).sum(-1) <= 50).all()  # top-k 50, then top-p


SMALL = QualityConfig(probe_size=8, probe_max_tokens=16)


@pytest.fixture(scope="module")
def smollm2(smollm2_gguf):
    torch.set_num_threads(1)
    config = _smol()
    return WeightCache().get(config)[0], load_tokenizer("smollm2-135m"), run_probe(config, WeightCache().get(
        config)[0], SMALL, load_tokenizer("smollm2-135m"))


def _smol(**knobs) -> EngineConfig:
    return EngineConfig.from_flat("smollm2-135m", device="cpu", dtype="float32", device_memory_gb=1.0,
                                  max_model_len=512, **knobs)


def test_real_model_answers_every_probe_task_in_fp32(smollm2):
    _, _, reference = smollm2
    assert reference.correct == [True] * 8


def test_a_clip_that_changes_answers_fails_on_the_task_score(smollm2):
    model, tokenizer, reference = smollm2
    result = compare(reference, run_probe(_smol(qk_clip=4.0), model, SMALL, tokenizer))
    assert result.task_score == 0.0
    assert "task score" in result.describe(SMALL) and result.violation(SMALL) > 0


def test_half_topk_is_guarded_by_the_sampling_distance_and_passes(smollm2):
    model, tokenizer, reference = smollm2
    result = compare(reference, run_probe(_smol(sampler_half_topk=True), model, SMALL, tokenizer))
    assert (result.token_agreement, result.mean_kl, result.task_score) == (1.0, 0.0, 1.0)
    assert 0.0 <= result.sampling_tv < SMALL.max_sampling_tv
