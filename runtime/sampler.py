"""Token sampling: greedy rows in one argmax, the rest per sequence with its own seeded generator.

A per-sequence generator makes a seeded request reproducible whatever else shares its batches.
"""

from __future__ import annotations

import torch

from runtime.sampling_params import SamplingParams


def filter_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Temperature, top-k and top-p applied to one row of fp32 logits [V]."""
    logits = logits / params.temperature
    if 0 < params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        drop = cum - sorted_logits.softmax(-1) >= params.top_p  # keep the smallest set reaching top_p
        logits = logits.masked_fill(torch.zeros_like(drop).scatter(0, order, drop), float("-inf"))
    return logits


class Sampler:
    def __init__(self) -> None:
        self.generators: dict[int, torch.Generator] = {}  # seq id -> its generator

    def forget(self, seq_id: int) -> None:
        self.generators.pop(seq_id, None)

    def _generator(self, seq_id: int, seed: int, device: torch.device) -> torch.Generator:
        gen = self.generators.get(seq_id)
        if gen is None:
            gen = self.generators[seq_id] = torch.Generator(device=device).manual_seed(seed)
        return gen

    def sample(self, logits: torch.Tensor, rows: list[list[tuple[int, int, SamplingParams]]]) -> list[list[int]]:
        """logits: [N, V] fp32; rows[i] lists (seq_id, seed, params) of the sequences drawing from row i.

        Returns one token per listed sequence, in the same nesting.
        """
        greedy = logits.argmax(dim=-1).tolist()  # [N]
        out: list[list[int]] = []
        for i, seqs in enumerate(rows):
            tokens = []
            for seq_id, seed, params in seqs:
                if params.greedy:
                    tokens.append(greedy[i])
                    continue
                probs = filter_logits(logits[i], params).softmax(-1)
                gen = self._generator(seq_id, seed, logits.device)
                tokens.append(int(torch.multinomial(probs, 1, generator=gen).item()))
            out.append(tokens)
        return out
