"""ModelInfo (read without torch) agrees with the transformers config the loader builds, for every kind of model."""

from __future__ import annotations

import pytest

from runtime import ModelLoadError, model_info
from runtime.model.loader import load_config
from runtime.model.presets import PRESETS


def _agrees(name: str) -> None:
    info, hf = model_info(name), load_config(name)
    heads = hf.num_attention_heads
    assert (info.vocab_size, info.hidden_size, info.intermediate_size, info.num_layers, info.num_heads) == (
        hf.vocab_size, hf.hidden_size, hf.intermediate_size, hf.num_hidden_layers, heads)
    assert info.num_kv_heads == (hf.num_key_value_heads or heads)
    assert info.head_dim == (getattr(hf, "head_dim", None) or hf.hidden_size // heads)
    assert info.max_position_embeddings == hf.max_position_embeddings
    assert info.tie_word_embeddings == bool(hf.tie_word_embeddings)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets(name):
    _agrees(name)
    assert model_info(name).random_weights


def test_hf_folders(llama_dir, qwen2_dir):
    for folder in (llama_dir, qwen2_dir):
        _agrees(str(folder))
        assert not model_info(str(folder)).random_weights


def test_gguf_metadata(smollm2_gguf):
    _agrees(str(smollm2_gguf))
    info = model_info(str(smollm2_gguf))
    assert (info.num_layers, info.hidden_size, info.num_heads, info.num_kv_heads, info.vocab_size) == (
        30, 576, 9, 3, 49152)
    assert info.tie_word_embeddings and info.kv_layout == (30, 3, 64)


def test_unknown_model_is_a_config_error_naming_it():
    with pytest.raises(ModelLoadError, match=r"^model '/no/such' is neither a preset"):
        model_info("/no/such")
