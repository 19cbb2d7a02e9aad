"""A tensor-parallel engine simulated from a one-device profile: less work per rank, more communication.

At degree d every rank holds 1/d of the attention heads, the KV heads and the MLP (`runtime.model.parallel`),
so a step's work terms (GEMM rows, attention reads) shrink d-fold, while its launch floor and constant do not
(every rank launches every layer: the ranks of our runtime run eagerly, no CUDA graphs). Each layer adds two
all-reduces of the step's hidden states [T, hidden], and the LM head a gather of the sampled rows' logits,
costed like an all-reduce of [rows, vocab]:

    t(d) = max(floor, c0 + (c1 x tokens + c2 x attention + c3 x decodes + c4 x context) / d)
           + 2 x layers x allreduce(T x hidden x bytes) + allreduce(rows x vocab x bytes)

The d-fold split of the work is the ideal (small GEMMs use the device less well): a simulated TP gain is an
upper bound until a profile at that degree refits it. An all-reduce costs `latency_s + bytes x s_per_byte`,
measured per degree into the profile (`GpuProfile.allreduce`, e.g. gloo on a CPU), or else `estimate`:
unmeasured, and said so wherever a figure is simulated with it.

Memory per rank: the embedding and the norms whole, every other weight (and the LM head) 1/d, the KV heads 1/d.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from runtime.model.info import ModelInfo
from runtime.sim.stepmodel import FEATURES, StepShape, StepTimeModel, Variant

__all__ = ["AllReduceCost", "ParallelStepModel", "estimate", "rank_kv_layout", "rank_weight_bytes"]


class AllReduceCost(NamedTuple):
    latency_s: float  # a collective's fixed cost (launch and synchronisation)
    s_per_byte: float  # per byte of the tensor reduced
    measured: bool  # false: `estimate`, not measured on the profiled device

    def seconds(self, nbytes: float) -> float:
        return self.latency_s + nbytes * self.s_per_byte


# Unmeasured estimate for NCCL's ring all-reduce over NVLink 4 (H100/H200 SXM), no CUDA graphs: 15 us of launch
# and synchronisation per eager collective (NCCL's small-message latency is ~10 us; the eager launch adds to it),
# and a bus bandwidth of 360 GB/s (80% of NVLink 4's 450 GB/s a direction), a ring moving 2(d-1)/d of the tensor.
ESTIMATE_LATENCY_S = 15e-6
ESTIMATE_BUS_BYTES_S = 360e9


def estimate(degree: int) -> AllReduceCost:
    """The documented, unmeasured all-reduce cost at `degree` (see above)."""
    return AllReduceCost(ESTIMATE_LATENCY_S, 2 * (degree - 1) / degree / ESTIMATE_BUS_BYTES_S, measured=False)


@dataclass(frozen=True)
class ParallelStepModel:
    """The step time of one rank at a degree (all ranks step together), from the one-device model (`of`)."""

    split: StepTimeModel  # the one-device model with its work terms / degree
    allreduce: AllReduceCost
    info: ModelInfo
    dtype_bytes: int  # of the hidden states and logits the collectives move

    @classmethod
    def of(cls, base: StepTimeModel, degree: int, allreduce: AllReduceCost, info: ModelInfo,
           dtype_bytes: int) -> ParallelStepModel:
        split = {k: _split(c, degree) for k, c in base.coefficients.items()}
        return cls(replace(base, coefficients=split), allreduce, info, dtype_bytes)

    def predict_tiers(self, parts: Sequence[tuple[Variant, StepShape]]) -> float:
        if not parts:
            return self.split.predict_tiers(parts)
        tokens = sum(s.prefill_tokens + s.decode_seqs for _, s in parts)
        rows = sum(s.decode_seqs + (1 if s.prefill_tokens else 0) for _, s in parts)
        hidden = self.allreduce.seconds(tokens * self.info.hidden_size * self.dtype_bytes)
        logits = self.allreduce.seconds(rows * self.info.vocab_size * self.dtype_bytes)
        return self.split.predict_tiers(parts) + 2 * self.info.num_layers * hidden + logits


def _split(coef: tuple[float, ...], degree: int) -> tuple[float, ...]:
    """The work coefficients (every feature but the constant) / degree; the constant and the floor kept."""
    work = len(FEATURES)
    return (coef[0], *(c / degree for c in coef[1:work]), *coef[work:])


def rank_weight_bytes(weight_bytes: int, info: ModelInfo, degree: int) -> int:
    """One rank's weights: the embedding and the norms whole, the rest (an untied LM head's own rows too) 1/d."""
    if degree == 1:
        return weight_bytes
    per_param = weight_bytes / info.num_params
    whole = info.vocab_size * info.hidden_size + (2 * info.num_layers + 1) * info.hidden_size
    split = info.num_params - whole + (info.vocab_size * info.hidden_size if info.tie_word_embeddings else 0)
    return int(per_param * (whole + split / degree))


def rank_kv_layout(info: ModelInfo, degree: int) -> tuple[int, int, int]:
    layers, kv_heads, head_dim = info.kv_layout
    return layers, kv_heads // degree, head_dim
