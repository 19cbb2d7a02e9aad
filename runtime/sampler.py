"""Token sampling: greedy rows in one argmax, the rest per sequence with its own seeded generator.

A per-sequence generator makes a seeded request reproducible whatever else shares its batches.

`kernel.sampler_half_topk` batches every top-k row: the k candidates are selected in half precision
(fp16) over the whole vocabulary, then temperature, top-p and the softmax run in fp32 on the exact
logits of those k survivors, and each sequence draws from its k probabilities on the host with its
own CPU generator. For a bf16 model the selection is exact for logits of magnitude between about
6e-5 and 65504 (fp16 holds those bf16 values exactly); for fp32 logits two candidates closer than
fp16's resolution may swap at the k-th place.

`sample_with_logprobs` also gives, for each sequence whose params ask (`SamplingParams.logprobs`), the
sampled token's log-probability and the top-k under the raw logits (vLLM's default): computed on the
device beside the greedy argmax and brought to the host with it in one transfer. `sample` computes none.

`sample_deferred` (`scheduler.async_scheduling`) makes `sample`'s draws with the same ops and generators but
leaves the tokens on the device (`runtime.deferred`): no read of the device until the engine asks for them.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from runtime.backend import SampleRows
from runtime.deferred import DeferredTokens, host_to_device
from runtime.outputs import TokenLogprob
from runtime.sampling_params import SamplingParams

HALF_MAX = 65504.0  # largest finite fp16: logits are clamped to it before the cast


def beyond_top_p(sorted_probs: torch.Tensor, top_p: float | torch.Tensor) -> torch.Tensor:
    """Mask of the entries past the smallest leading set whose probability reaches top_p.

    sorted_probs [..., V] in decreasing order; top_p a float or a tensor broadcasting to [..., 1].
    """
    return sorted_probs.cumsum(-1) - sorted_probs >= top_p


def filter_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Temperature, top-k and top-p applied to one row of fp32 logits [V]."""
    logits = logits / params.temperature
    if 0 < params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        drop = beyond_top_p(sorted_logits.softmax(-1), params.top_p)
        logits = logits.masked_fill(torch.zeros_like(drop).scatter(0, order, drop), float("-inf"))
    return logits


class Survivors(NamedTuple):
    probs: torch.Tensor  # [R, K] fp32, rows sum to 1; 0 past a row's own top_k and where top-p cuts
    token_ids: torch.Tensor  # [R, K] int64, in order of decreasing probability


def topk_survivors(logits: torch.Tensor, params: list[SamplingParams]) -> Survivors:
    """Rows of fp32 logits [R, V], each with 0 < top_k: top-k in fp16, the rest in fp32 over the k."""
    k = min(logits.shape[-1], max(p.top_k for p in params))
    device = logits.device
    ids = logits.clamp(-HALF_MAX, HALF_MAX).to(torch.float16).topk(k, dim=-1).indices  # [R, K]
    temps = torch.tensor([p.temperature for p in params], device=device)
    exact, order = (logits.gather(1, ids) / temps[:, None]).sort(dim=-1, descending=True)  # fp32 [R, K]
    ids = ids.gather(1, order)
    own_k = torch.tensor([p.top_k for p in params], device=device)
    exact = exact.masked_fill(torch.arange(k, device=device)[None, :] >= own_k[:, None], float("-inf"))
    probs = exact.softmax(-1)
    top_p = torch.tensor([p.top_p for p in params], device=device)
    probs = probs.masked_fill(beyond_top_p(probs, top_p[:, None]), 0.0)
    return Survivors(probs / probs.sum(-1, keepdim=True), ids)


class Sampled(NamedTuple):
    tokens: list[list[int]]  # one per listed sequence, in the nesting of `rows`
    logprobs: list[list[TokenLogprob | None]]  # the same nesting; None where the params do not ask


class Sampler:
    def __init__(self, half_topk: bool = False) -> None:
        self.half_topk = half_topk
        self.generators: dict[int, torch.Generator] = {}  # seq id -> its generator

    def forget(self, seq_id: int) -> None:
        self.generators.pop(seq_id, None)

    def _generator(self, seq_id: int, seed: int, device: torch.device) -> torch.Generator:
        gen = self.generators.get(seq_id)
        if gen is None:
            gen = self.generators[seq_id] = torch.Generator(device=device).manual_seed(seed)
        return gen

    def _batched(self, params: SamplingParams) -> bool:
        return self.half_topk and params.top_k > 0

    def sample(self, logits: torch.Tensor, rows: list[list[tuple[int, int, SamplingParams]]]) -> list[list[int]]:
        """logits: [N, V] fp32; rows[i] lists (seq_id, seed, params) of the sequences drawing from row i.

        Returns one token per listed sequence, in the same nesting.
        """
        greedy = logits.argmax(dim=-1).tolist()  # [N]
        out = [[greedy[i]] * len(seqs) for i, seqs in enumerate(rows)]
        self._draw(logits, rows, out)
        return out

    def sample_with_logprobs(self, logits: torch.Tensor, rows: list[list[tuple[int, int, SamplingParams]]]) -> Sampled:
        """`sample`, and the `TokenLogprob` of each sequence whose params ask (None for the others)."""
        greedy_dev = logits.argmax(dim=-1)  # [N], left on the device until the one transfer
        out = [[0] * len(seqs) for seqs in rows]
        self._draw(logits, rows, out)  # the non-greedy draws
        asks = [(i, j, p) for i, seqs in enumerate(rows) for j, (_, _, p) in enumerate(seqs) if p.logprobs is not None]
        k = min(logits.shape[-1], max((p.logprobs for *_, p in asks), default=0))
        device = logits.device
        picks = torch.tensor([i for i, _, _ in asks], device=device, dtype=torch.long)  # [A]
        drawn = torch.tensor([out[i][j] for i, j, _ in asks], device=device, dtype=torch.long)
        is_greedy = torch.tensor([p.greedy for *_, p in asks], device=device, dtype=torch.bool)
        chosen_ids = torch.where(is_greedy, greedy_dev[picks], drawn)  # [A]
        lp = logits[picks].log_softmax(-1)  # [A, V]
        top = lp.topk(k, dim=-1)  # [A, K] each
        packed = torch.cat([greedy_dev.double(), lp.gather(1, chosen_ids[:, None])[:, 0].double(),
                            top.values.double().flatten(), top.indices.double().flatten()]).tolist()  # one transfer
        n, a = len(rows), len(asks)
        for i, seqs in enumerate(rows):
            for j, (_, _, params) in enumerate(seqs):
                if params.greedy:
                    out[i][j] = int(packed[i])
        logprobs: list[list[TokenLogprob | None]] = [[None] * len(seqs) for seqs in rows]
        values, ids = packed[n + a : n + a + a * k], packed[n + a + a * k :]
        for r, (i, j, params) in enumerate(asks):
            own = slice(r * k, r * k + min(params.logprobs, k))
            logprobs[i][j] = TokenLogprob(out[i][j], packed[n + r], tuple(map(int, ids[own])), tuple(values[own]))
        return Sampled(out, logprobs)

    def _draw(self, logits: torch.Tensor, rows: list[list[tuple[int, int, SamplingParams]]],
              out: list[list[int]]) -> None:
        """Draw every non-greedy sequence's token into `out` (greedy slots are left as they are)."""
        batched: list[tuple[int, int, int, int, SamplingParams]] = []  # (row, slot, seq_id, seed, params)
        for i, seqs in enumerate(rows):
            for j, (seq_id, seed, params) in enumerate(seqs):
                if params.greedy:
                    continue
                if self._batched(params):
                    batched.append((i, j, seq_id, seed, params))
                else:
                    probs = filter_logits(logits[i], params).softmax(-1)
                    gen = self._generator(seq_id, seed, logits.device)
                    out[i][j] = int(torch.multinomial(probs, 1, generator=gen).item())
        if batched:
            self._sample_survivors(logits, batched, out)

    def _draw_on_device(self, row: torch.Tensor, seq_id: int, seed: int, params: SamplingParams) -> torch.Tensor:
        """`_draw`'s draw from a row of fp32 logits [V], left on the device: [1] int64. torch.multinomial reads
        the device to check its input; this is the draw it makes for one sample (argmax of p / q, q ~ Exp(1),
        from the same generator), the same token without the read."""
        probs = filter_logits(row, params).softmax(-1)
        q = torch.empty_like(probs).exponential_(1, generator=self._generator(seq_id, seed, row.device))
        return (probs / q).argmax(dim=-1, keepdim=True)

    def sample_deferred(self, logits: torch.Tensor, rows: SampleRows) -> DeferredTokens | None:
        """`sample`'s tokens (the same draws, flattened in the order of `rows`) left on the device, their copy to
        the host under way (`scheduler.async_scheduling`); None when a row draws on the host (the batched
        half-precision top-k), so the step samples with `sample` instead."""
        if self.half_topk and any(self._batched(p) for seqs in rows for *_, p in seqs):
            return None
        member_rows = [i for i, seqs in enumerate(rows) for _ in seqs]
        tokens = logits.argmax(dim=-1)[host_to_device(member_rows, np.int64, logits.device)]  # [M]
        j = 0
        for i, seqs in enumerate(rows):
            for seq_id, seed, params in seqs:
                if not params.greedy:
                    tokens[j : j + 1] = self._draw_on_device(logits[i], seq_id, seed, params)
                j += 1
        return DeferredTokens(tokens)

    def _sample_survivors(self, logits: torch.Tensor, batched: list, out: list[list[int]]) -> None:
        """One batched top-k for every listed draw, then a draw per sequence on the host."""
        picks = torch.tensor([b[0] for b in batched], device=logits.device)
        survivors = topk_survivors(logits[picks], [b[4] for b in batched])
        probs, ids = survivors.probs.cpu(), survivors.token_ids.cpu()
        for r, (i, j, seq_id, seed, _) in enumerate(batched):
            choice = torch.multinomial(probs[r], 1, generator=self._generator(seq_id, seed, probs.device))
            out[i][j] = int(ids[r, choice])


def sampling_probs(logits: torch.Tensor, params: SamplingParams, half_topk: bool) -> torch.Tensor:
    """The distribution a sequence with `params` draws from at each row of fp32 logits [R, V], as a dense
    [R, V] (the guardrail compares the two paths with it): the per-row fp32 path, or the batched fp16 top-k."""
    if not (half_topk and params.top_k > 0):
        return torch.stack([filter_logits(row, params).softmax(-1) for row in logits])
    survivors = topk_survivors(logits, [params] * logits.shape[0])
    return torch.zeros_like(logits).scatter(1, survivors.token_ids, survivors.probs)
