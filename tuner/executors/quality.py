"""Quality guardrail for knobs that change numerics (qk_clip, kv_cache_dtype, sampler_half_topk).

The reference is the candidate itself with those knobs neutral (`EngineConfig.numerics_neutral`). A
fixed probe set (`tuner.executors.probes`: real chat prompts when the model has a tokenizer) is generated
greedily under both, recording every next-token distribution. Four figures come out:
    token agreement  share of generated positions where both chose the same token
    mean KL          mean KL(reference || candidate) over the positions both saw the same history
                     (up to and including the first disagreement: later histories differ)
    task score       of the task prompts the reference answers correctly, the share the candidate
                     still answers correctly (None: no tokenizer, or the reference answers none)
    sampling TV      mean total-variation distance between the distributions the two configs' samplers
                     draw from (temperature 1, top-k 50, top-p 0.95) on the same positions: the one
                     figure `sampler_half_topk` moves, since greedy decoding never samples
A candidate past any threshold of `QualityConfig` is infeasible; the reason names the figure.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import torch

from runtime import (
    EngineConfig,
    LLMEngine,
    NoTokenizerError,
    RequestOutputKind,
    SamplingParams,
    encode_chat,
    sampling_probs,
)
from tuner.config import QualityConfig
from tuner.executors.probes import ProbePrompt, answered, probe_prompts
from tuner.measure.job import QualityResult

# The sampling the TV figure compares the sampler paths under (a common chat setting).
SAMPLING = SamplingParams(temperature=1.0, top_k=50, top_p=0.95)


class ProbeSet(NamedTuple):
    tokens: list[list[int]]  # greedy tokens per prompt
    logprobs: list[list[torch.Tensor]]  # per prompt, per generated position: log-softmax [V]
    correct: list[bool | None]  # per prompt: a task answered correctly; None for open prompts or no text
    half_topk: bool  # the sampler path this config draws with


def chat_encoder(tokenizer: object | None):
    """One user turn through the model's chat template, or None (no tokenizer, or no template)."""
    if tokenizer is None or getattr(tokenizer, "chat_template", None) is None:
        return None
    return lambda text: encode_chat(tokenizer, [{"role": "user", "content": text}])


def run_probe(config: EngineConfig, model: object, cfg: QualityConfig, tokenizer: object | None = None) -> ProbeSet:
    """The probe set greedily under `config`, eager: CUDA graphs replay the eager numerics exactly (measured,
    experiments/RESULTS.md), and a capture per probe engine would cost seconds each."""
    config = replace(config, kernel=replace(config.kernel, cuda_graphs=False))
    encode = chat_encoder(tokenizer)
    engine = LLMEngine(config, model=model, record_logprobs=True, tokenizer=tokenizer if encode else None)
    params = SamplingParams(max_tokens=cfg.probe_max_tokens, temperature=0.0, ignore_eos=encode is None,
                            output_kind=RequestOutputKind.FINAL_ONLY)
    prompts = probe_prompts(cfg, engine.model_config.vocab_size, encode)
    for i, prompt in enumerate(prompts):
        engine.add_request(f"probe-{i}", prompt.token_ids, params)
    finished = {}
    while engine.has_unfinished_requests():
        finished |= {out.request_id: out.outputs[0] for out in engine.step() if out.finished}
    ids = [f"probe-{i}" for i in range(len(prompts))]
    return ProbeSet([finished[i].token_ids for i in ids], [engine.logprobs[i] for i in ids],
                    [_correct(p, finished[i].text) for p, i in zip(prompts, ids)], config.kernel.sampler_half_topk)


def _correct(prompt: ProbePrompt, text: str | None) -> bool | None:
    return None if prompt.answers is None or text is None else answered(text, prompt.answers)


def compare(reference: ProbeSet, candidate: ProbeSet) -> QualityResult:
    agree = total = 0
    kls: list[float] = []
    tvs: list[float] = []
    for ref_toks, cand_toks, ref_lp, cand_lp in zip(reference.tokens, candidate.tokens, reference.logprobs,
                                                    candidate.logprobs):
        total += max(len(ref_toks), len(cand_toks))  # an early stop on one side counts as disagreement
        agree += sum(a == b for a, b in zip(ref_toks, cand_toks))
        same = _same_history(ref_toks, cand_toks)
        if same == 0:  # a probe that generated nothing on one side: no distribution to compare
            continue
        p, q = torch.stack(ref_lp[:same]), torch.stack(cand_lp[:same])  # [P, V] each
        kls += (p.exp() * (p - q)).sum(-1).tolist()
        tvs += _sampling_tv(p, q, reference.half_topk, candidate.half_topk).tolist()
    return QualityResult(agree / max(1, total), sum(kls) / max(1, len(kls)), _task_score(reference, candidate),
                         sum(tvs) / max(1, len(tvs)))


def _same_history(a: list[int], b: list[int]) -> int:
    """Positions that saw the same history: up to and including the first disagreement."""
    n = min(len(a), len(b))
    first = next((i for i in range(n) if a[i] != b[i]), None)
    return n if first is None else first + 1


def _sampling_tv(p: torch.Tensor, q: torch.Tensor, p_half: bool, q_half: bool) -> torch.Tensor:
    """[P] total-variation distances between the two sampler paths' distributions."""
    return 0.5 * (sampling_probs(p, SAMPLING, p_half) - sampling_probs(q, SAMPLING, q_half)).abs().sum(-1)


def _task_score(reference: ProbeSet, candidate: ProbeSet) -> float | None:
    kept = [c for r, c in zip(reference.correct, candidate.correct) if r]
    return None if not kept else sum(bool(c) for c in kept) / len(kept)


__all__ = ["SAMPLING", "NoTokenizerError", "ProbeSet", "chat_encoder", "compare", "run_probe"]
