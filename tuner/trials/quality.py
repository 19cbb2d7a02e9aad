"""Quality guardrail for knobs that change numerics (qk_clip, kv_cache_dtype, ...).

A fixed probe set (seeded random prompts) is generated greedily under the reference config and
under the candidate, recording every next-token distribution. Two figures come out:
    token agreement  share of generated positions where both chose the same token
    mean KL          mean KL(reference || candidate) over the positions both saw the same history
                     (up to and including the first disagreement: later histories differ)
A candidate below `min_token_agreement` or above `max_mean_kl` is infeasible.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from runtime import EngineConfig, LLMEngine, RequestOutputKind, SamplingParams
from tuner.config import QualityConfig
from tuner.trials.job import QualityResult


class ProbeSet(NamedTuple):
    tokens: list[list[int]]  # greedy tokens per prompt
    logprobs: list[list[torch.Tensor]]  # per prompt, per generated position: log-softmax [V]


def probe_prompts(cfg: QualityConfig, vocab_size: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(1234)
    lengths = torch.randint(16, 129, (cfg.probe_size,), generator=gen).tolist()
    return [torch.randint(3, vocab_size, (n,), generator=gen).tolist() for n in lengths]


def run_probe(config: EngineConfig, model: object, cfg: QualityConfig) -> ProbeSet:
    engine = LLMEngine(config, model=model, record_logprobs=True)
    params = SamplingParams(max_tokens=cfg.probe_max_tokens, temperature=0.0, ignore_eos=True,
                            output_kind=RequestOutputKind.FINAL_ONLY)
    prompts = probe_prompts(cfg, engine.model_config.vocab_size)
    for i, prompt in enumerate(prompts):
        engine.add_request(f"probe-{i}", prompt, params)
    tokens: dict[str, list[int]] = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                tokens[out.request_id] = out.outputs[0].token_ids
    ids = [f"probe-{i}" for i in range(len(prompts))]
    return ProbeSet([tokens[i] for i in ids], [engine.logprobs[i] for i in ids])


def compare(reference: ProbeSet, candidate: ProbeSet) -> QualityResult:
    agree = total = 0
    kls: list[float] = []
    for ref_toks, cand_toks, ref_lp, cand_lp in zip(reference.tokens, candidate.tokens, reference.logprobs,
                                                    candidate.logprobs):
        total += len(ref_toks)
        agree += sum(a == b for a, b in zip(ref_toks, cand_toks))
        for pos, (a, b) in enumerate(zip(ref_toks, cand_toks)):
            p, q = ref_lp[pos], cand_lp[pos]
            kls.append(float((p.exp() * (p - q)).sum()))
            if a != b:
                break
    return QualityResult(agree / max(1, total), sum(kls) / max(1, len(kls)))
