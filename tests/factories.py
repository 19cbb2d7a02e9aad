"""Small factories for tests: tiny checkpoints, transformers references, engines with integrity checks."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

from runtime import LLM, SamplingParams

_SHAPE = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, bos_token_id=1, eos_token_id=2)


def save_tiny_checkpoint(arch: str, folder: Path) -> Path:
    """A random fp32 Llama or Qwen2 (qkv bias, tied embeddings) saved as config + safetensors."""
    torch.manual_seed(0 if arch == "llama" else 1)
    config = LlamaConfig(**_SHAPE) if arch == "llama" else Qwen2Config(**_SHAPE, tie_word_embeddings=True)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    if arch == "qwen2":  # make the qkv biases matter
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                torch.nn.init.normal_(proj.bias, std=0.5)
    model.save_pretrained(folder)
    return folder


@cache
def _hf_model(folder: str):
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


def hf_greedy(folder: Path, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    """transformers' own greedy `generate`, one prompt at a time (no padding), EOS ignored."""
    model = _hf_model(str(folder))
    outs = []
    for prompt in prompts:
        ids = torch.tensor([prompt])
        with torch.no_grad():
            gen = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                 min_new_tokens=max_new_tokens, do_sample=False, pad_token_id=0)
        outs.append(gen[0, len(prompt):].tolist())
    return outs


def make_llm(model: str | Path, **knobs: Any) -> LLM:
    """A CPU engine that checks its block bookkeeping after every step."""
    knobs.setdefault("device", "cpu")
    knobs.setdefault("debug_integrity", True)
    knobs.setdefault("device_memory_gb", 0.02)  # a pool of a few thousand slots: fast integrity checks
    return LLM(model=str(model), **knobs)


def greedy(max_tokens: int) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)


def assert_drained(llm: LLM) -> None:
    """After all requests finished: integrity holds and no block is held by anyone."""
    engine = llm.engine
    assert not engine.has_unfinished_requests()
    engine.check_integrity()
    assert sum(p.num_used for p in engine.kv.pools) == 0
    assert sum(p.num_used for p in engine.kv.cpu_pools) == 0
