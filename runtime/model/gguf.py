"""GGUF files (llama.cpp's format): a transformers `LlamaConfig` from the metadata, and the tensors
dequantised to float32 under Hugging Face's parameter names (the loader casts them to the runtime's dtype).
The metadata reads without torch (`values`, for `runtime.model.info`); torch and transformers load only
for `config` and `tensors()`.

The config takes the fields transformers itself derives from the same file (tests compare them), and
`tie_word_embeddings` is true when the file has no `output.weight`, as there.

llama.cpp's converter reorders the rows of q_proj and k_proj so that its rotary rotates adjacent pairs.
Per head of d rows, Hugging Face's rotate-half layout pairs row i with row i + d/2:

    Hugging Face: x0 x1 .. x(d/2-1) | y0 y1 .. y(d/2-1)      GGUF: x0 y0 x1 y1 .. x(d/2-1) y(d/2-1)

`_unpermute` views the GGUF rows as [heads, d/2, 2] and swaps the last two axes, giving [heads, 2, d/2]:
Hugging Face's order again (transformers does the same when it loads a GGUF file).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

from runtime.model.source import ModelLoadError

ARCHITECTURES = ("llama",)

# "<architecture>.<key>" in the metadata -> LlamaConfig field (transformers' own mapping for llama)
_CONFIG_KEYS = {
    "context_length": "max_position_embeddings",
    "block_count": "num_hidden_layers",
    "feed_forward_length": "intermediate_size",
    "embedding_length": "hidden_size",
    "rope.dimension_count": "head_dim",
    "rope.freq_base": "rope_theta",
    "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "vocab_size": "vocab_size",
}
_REQUIRED = ("block_count", "embedding_length", "feed_forward_length", "attention.head_count")
_TOKEN_IDS = {"bos": "bos_token_id", "eos": "eos_token_id", "padding": "pad_token_id", "unknown": "unk_token_id"}

# GGUF tensor name -> Hugging Face's: per layer ("blk.N.<name>.weight") and global ("<name>.weight")
_LAYER_TENSORS = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
_GLOBAL_TENSORS = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}


class GGUFFile:
    """One GGUF file, opened (memory-mapped) once: `config` at once, `tensors()` on demand."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.reader = GGUFReader(path)
        except (ValueError, OSError) as e:  # bad magic, truncated tensor data, unreadable
            raise ModelLoadError(f"{path}: not a readable GGUF file ({e})") from e
        self.architecture = self._field("general.architecture")
        if self.architecture not in ARCHITECTURES:
            raise ModelLoadError(f"{path}: GGUF architecture {self.architecture!r} is not supported; "
                                 f"use one of {ARCHITECTURES}")
        self.values = self._values()  # the LlamaConfig fields, as plain data

    def _field(self, key: str) -> Any:
        field = self.reader.fields.get(key)
        if field is None:
            raise ModelLoadError(f"{self.path}: GGUF metadata has no {key!r}")
        return field.contents()

    @property
    def config(self):
        """The transformers `LlamaConfig` of the file."""
        from transformers import LlamaConfig

        return LlamaConfig(**self.values)

    def _values(self) -> dict[str, Any]:
        arch, fields = self.architecture, self.reader.fields
        names = {t.name for t in self.reader.tensors}
        for key in _REQUIRED:
            self._field(f"{arch}.{key}")
        scaling = fields.get(f"{arch}.rope.scaling.type")
        if (scaling is not None and scaling.contents() != "none") or "rope_freqs.weight" in names:
            raise ModelLoadError(f"{self.path}: scaled RoPE in GGUF files is not supported")
        values = {hf: self._field(f"{arch}.{key}") for key, hf in _CONFIG_KEYS.items() if f"{arch}.{key}" in fields}
        values |= {hf: self._field(f"tokenizer.ggml.{key}_token_id") for key, hf in _TOKEN_IDS.items()
                   if f"tokenizer.ggml.{key}_token_id" in fields}
        if "vocab_size" not in values:  # older files: the vocabulary's length, as transformers takes it
            values["vocab_size"] = len(self._field("tokenizer.ggml.tokens"))
        values["tie_word_embeddings"] = "output.weight" not in names
        return values

    def tensors(self) -> Iterator[tuple[str, Any]]:
        """(Hugging Face name, float32 torch tensor) for every tensor, q/k rows back in Hugging Face's order."""
        import torch

        heads = {"attn_q": self.values["num_attention_heads"],
                 "attn_k": self.values.get("num_key_value_heads", self.values["num_attention_heads"])}
        for tensor in self.reader.tensors:
            kind, name = self._hf_name(tensor.name)
            weights = dequantize(tensor.data, tensor.tensor_type)  # [out, in] (numpy order), float32
            if kind in heads:
                weights = _unpermute(weights, heads[kind])
            yield name, torch.from_numpy(np.array(weights, dtype=np.float32))  # a copy: the map is read-only

    def _hf_name(self, name: str) -> tuple[str, str]:
        """(GGUF tensor kind, Hugging Face parameter name) for a tensor of this file."""
        parts = name.split(".")
        if len(parts) == 4 and parts[0] == "blk" and parts[2] in _LAYER_TENSORS:
            return parts[2], f"model.layers.{parts[1]}.{_LAYER_TENSORS[parts[2]]}.{parts[3]}"
        if len(parts) == 2 and parts[0] in _GLOBAL_TENSORS:
            return parts[0], f"{_GLOBAL_TENSORS[parts[0]]}.{parts[1]}"
        raise ModelLoadError(f"{self.path}: tensor {name!r} has no counterpart in a Llama model")


def _unpermute(weights: np.ndarray, heads: int) -> np.ndarray:
    """q_proj / k_proj rows (weight or bias) from llama.cpp's interleaved order to Hugging Face's."""
    rows = weights.shape[0]
    split = weights.reshape(heads, rows // heads // 2, 2, *weights.shape[1:])  # [heads, d/2, 2, ...]
    return split.swapaxes(1, 2).reshape(weights.shape)  # [heads, 2, d/2, ...] -> [heads*d, ...]
