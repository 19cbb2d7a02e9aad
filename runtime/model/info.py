"""What must be known of a model before its weights load: shape, vocabulary, length limits.

Read from a preset's shape or a local folder's `config.json` as plain data, with transformers'
defaults for absent keys: no torch, no transformers. A tuner's parent process plans with this
(`max_model_len`, vocabulary, KV bytes per token) while only its worker loads weights.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from runtime.model.presets import PRESETS
from runtime.model.source import ModelLoadError, SourceKind, resolve_source

__all__ = ["ModelInfo", "ModelLoadError", "model_info"]

# transformers' defaults for keys a config.json may leave out, by model_type
_DEFAULT_MAX_POSITIONS = {"llama": 2048, "mistral": 4096 * 32, "qwen2": 32768}
_DEFAULT_WINDOW = {"mistral": 4096}


class ModelInfo(NamedTuple):
    name: str  # the preset name or folder, as configured
    model_type: str  # llama | mistral | qwen2
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    max_position_embeddings: int
    sliding_window: int | None  # the attention window when the model uses one
    tie_word_embeddings: bool
    random_weights: bool  # a preset: seeded random weights, no tokenizer

    @property
    def kv_layout(self) -> tuple[int, int, int]:
        """(layers, kv heads, head dim): what one token's K/V occupies per layer."""
        return self.num_layers, self.num_kv_heads, self.head_dim

    @property
    def num_params(self) -> int:
        """Parameters of the decoder (embeddings, attention, MLP, norms, head), biases ignored: a tensor-parallel
        rank's share of the weights (`runtime.sim.parallel.rank_weight_bytes`)."""
        h, i, layers = self.hidden_size, self.intermediate_size, self.num_layers
        attn = h * self.head_dim * (self.num_heads * 2 + self.num_kv_heads * 2)
        per_layer = attn + 3 * h * i + 2 * h
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return self.vocab_size * h + layers * per_layer + h + head


def model_info(name: str) -> ModelInfo:
    """The shape and limits of a preset, a GGUF file (its metadata) or a local Hugging Face folder (config.json)."""
    source = resolve_source(name)
    if source.kind is SourceKind.PRESET:
        model_type, shape = PRESETS[name]
        return _from_config(name, {"model_type": model_type, **shape}, random_weights=True)
    if source.kind is SourceKind.GGUF:
        from runtime.model.gguf import GGUFFile  # numpy and gguf only: no torch

        return _from_config(name, {"model_type": "llama", **GGUFFile(source.path).values}, random_weights=False)
    path = source.path
    try:
        data = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"{path / 'config.json'}: cannot be read ({e})") from None
    return _from_config(name, data, random_weights=False)


def _from_config(name: str, c: Mapping[str, Any], random_weights: bool) -> ModelInfo:
    model_type = c.get("model_type", "llama")
    heads = c["num_attention_heads"]
    window = c.get("sliding_window", _DEFAULT_WINDOW.get(model_type))
    active = c.get("use_sliding_window", model_type == "mistral")
    return ModelInfo(
        name=name, model_type=model_type, vocab_size=c["vocab_size"], hidden_size=c["hidden_size"],
        intermediate_size=c["intermediate_size"], num_layers=c["num_hidden_layers"], num_heads=heads,
        num_kv_heads=c.get("num_key_value_heads") or heads,
        head_dim=c.get("head_dim") or c["hidden_size"] // heads,
        max_position_embeddings=c.get("max_position_embeddings", _DEFAULT_MAX_POSITIONS.get(model_type, 2048)),
        sliding_window=window if window and active else None,
        tie_word_embeddings=bool(c.get("tie_word_embeddings", False)), random_weights=random_weights)
