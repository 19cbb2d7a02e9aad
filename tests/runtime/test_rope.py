"""The rotary tables: every row is what transformers' own rotary embedding gives at that position, so reading
a table at a token's position changes no value (greedy equality with transformers rests on it)."""

from __future__ import annotations

import pytest
import torch

from runtime.model.presets import preset_config
from runtime.model.rope import RotaryEmbedding


@pytest.mark.parametrize("name", ["tiny", "llama-3-8b", "qwen2-7b"])
def test_tables_equal_transformers_rotary_at_every_position(name: str) -> None:
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = preset_config(name)
    ours = RotaryEmbedding(config)
    cos, sin = ours.tables(torch.bfloat16)
    assert cos.shape == (config.max_position_embeddings, ours.inv_freq.numel() * 2)
    positions = torch.tensor([[0, 1, 17, 1000, config.max_position_embeddings - 1]])
    ref_cos, ref_sin = LlamaRotaryEmbedding(config)(torch.zeros(1, dtype=torch.bfloat16), positions)
    assert torch.equal(cos[positions[0]], ref_cos[0]) and torch.equal(sin[positions[0]], ref_sin[0])
    step = ours(positions[0], torch.bfloat16)
    assert step.cos is cos and step.sin is sin and torch.equal(step.positions, positions[0])
    assert ours.tables(torch.bfloat16)[0] is cos  # built once
