"""The Llama model split over tensor-parallel ranks (Megatron's layout), done to a loaded model in place.

A rank keeps its share of every projection and the model's own code runs unchanged on the smaller shapes:

    attention  qkv_proj   rows of its query heads, then of its KV heads   (column-parallel: no communication)
               o_proj     the columns of its query heads, then all-reduce  (`RowParallelLinear`)
    MLP        gate_up    its rows of gate, then the same rows of up        (column-parallel)
               down_proj  the matching columns, then all-reduce            (`RowParallelLinear`)
    LM head    its rows of the vocabulary, padded to equal shares, then all-gather (`VocabParallelHead`)

The embedding and the norms are whole on every rank. So one step is two all-reduces a layer and one gather
of the logits, and the KV cache of a rank holds its KV heads only (`LlamaForCausalLM.layout` reads them).
Weights are loaded whole and then cut, so a preset's seeded random weights are the same at every degree.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from runtime.distributed.group import RankGroup
from runtime.model.linear import Linear
from runtime.model.llama import MLP, Attention, LlamaForCausalLM

__all__ = ["RowParallelLinear", "VocabParallelHead", "shard_model"]


class RowParallelLinear(nn.Module):
    """y = all_reduce(x_r @ W_r^T) + b: this rank's input columns of a linear layer; the bias added once."""

    def __init__(self, linear: nn.Linear, cols: slice, group: RankGroup) -> None:
        super().__init__()
        self.weight = nn.Parameter(linear.weight[:, cols].clone(), requires_grad=False)  # [out, in / tp]
        self.bias = linear.bias
        self.group = group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.group.all_reduce(F.linear(x, self.weight))  # [T, out], summed over the ranks
        return y if self.bias is None else y + self.bias


class VocabParallelHead(nn.Module):
    """The LM head's rows of this rank's vocabulary share; `forward` gathers every rank's logits [N, V]."""

    def __init__(self, weight: torch.Tensor, group: RankGroup) -> None:
        super().__init__()
        vocab = weight.shape[0]
        share = -(-vocab // group.size)  # ceil: the last rank's share is padded with zero rows
        rows = weight[group.rank * share: (group.rank + 1) * share]
        padded = torch.zeros(share, weight.shape[1], dtype=weight.dtype, device=weight.device)
        padded[: rows.shape[0]] = rows
        self.weight = nn.Parameter(padded, requires_grad=False)  # [V / tp, H]
        self.vocab, self.group = vocab, group

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.group.all_gather(F.linear(hidden, self.weight))[:, : self.vocab]  # [N, V]


def _heads(rank: int, size: int, count: int, head_dim: int) -> slice:
    per = count // size
    return slice(rank * per * head_dim, (rank + 1) * per * head_dim)


def _rows(linear: Linear, parts: list[slice]) -> Linear:
    """A new linear layer made of `linear`'s output rows `parts`, in that order (column-parallel)."""
    weight = torch.cat([linear.weight[p] for p in parts])
    out = Linear(weight.shape[1], weight.shape[0], bias=linear.bias is not None,
                    device=weight.device, dtype=weight.dtype)
    out.weight = nn.Parameter(weight, requires_grad=False)
    if linear.bias is not None:
        out.bias = nn.Parameter(torch.cat([linear.bias[p] for p in parts]), requires_grad=False)
    return out


def _shard_attention(attn: Attention, group: RankGroup) -> None:
    r, n, d = group.rank, group.size, attn.head_dim
    q_size, kv_size = attn.split[0], attn.split[1]
    q, k = _heads(r, n, attn.num_heads, d), _heads(r, n, attn.num_kv_heads, d)
    kv = slice(q_size + k.start, q_size + k.stop)
    v = slice(q_size + kv_size + k.start, q_size + kv_size + k.stop)
    attn.qkv_proj = _rows(attn.qkv_proj, [q, kv, v])
    attn.o_proj = RowParallelLinear(attn.o_proj, q, group)
    attn.num_heads, attn.num_kv_heads = attn.num_heads // n, attn.num_kv_heads // n
    attn.split = (q.stop - q.start, k.stop - k.start, k.stop - k.start)


def _shard_mlp(mlp: MLP, group: RankGroup) -> None:
    inter = mlp.intermediate
    per = inter // group.size
    cols = slice(group.rank * per, (group.rank + 1) * per)
    mlp.gate_up_proj = _rows(mlp.gate_up_proj, [cols, slice(inter + cols.start, inter + cols.stop)])
    mlp.down_proj = RowParallelLinear(mlp.down_proj, cols, group)
    mlp.intermediate = per


@torch.no_grad()
def shard_model(model: LlamaForCausalLM, group: RankGroup) -> LlamaForCausalLM:
    """Cut a whole model down to rank `group.rank`'s share, in place (`engine_limits` checked the divisions)."""
    for layer in model.model.layers:
        _shard_attention(layer.self_attn, group)
        _shard_mlp(layer.mlp, group)
    model.lm_head = VocabParallelHead(model.lm_head.weight, group)
    return model
