"""Build a model: a preset with seeded random weights, a GGUF file, or a local Hugging Face folder (config +
safetensors). No hub access; `runtime.model.source` says which a name is."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch
from safetensors import safe_open
from transformers import AutoConfig

from runtime.model.llama import LlamaForCausalLM
from runtime.model.presets import preset_config
from runtime.model.rope import RotaryEmbedding
from runtime.model.source import ModelLoadError, ModelSource, SourceKind, resolve_source

__all__ = ["ModelLoadError", "load_config", "load_model"]

_FUSED = re.compile(r"(.*)\.(self_attn\.(q|k|v)_proj|mlp\.(gate|up)_proj)\.(weight|bias)$")


def load_config(name: str):
    """The transformers config of a preset, a GGUF file or a local folder."""
    return _config(resolve_source(name))


def _config(source: ModelSource):
    if source.kind is SourceKind.PRESET:
        return preset_config(source.name)
    if source.kind is SourceKind.GGUF:
        return _gguf(source.path).config
    return AutoConfig.from_pretrained(source.path, local_files_only=True)


def _gguf(path: Path):
    from runtime.model.gguf import GGUFFile  # the gguf package is needed for GGUF files only

    return GGUFFile(path)


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def load_model(name: str, dtype: torch.dtype, device: torch.device, seed: int = 0) -> LlamaForCausalLM:
    """Build the model on `device` in `dtype`; presets get seeded N(0, 0.02) weights, GGUF files are dequantised."""
    source = resolve_source(name)
    gguf = _gguf(source.path) if source.kind is SourceKind.GGUF else None  # read once: config and tensors
    config = gguf.config if gguf is not None else _config(source)
    with _default_dtype(dtype), torch.device("meta"):
        model = LlamaForCausalLM(config)
    model = model.to_empty(device=device)
    model.rotary = RotaryEmbedding(config).to(device)  # buffers are not materialised by to_empty
    if getattr(config, "tie_word_embeddings", False):
        model.lm_head.weight = model.model.embed_tokens.weight
    if source.kind is SourceKind.PRESET:
        _random_init(model, seed)
    elif gguf is not None:
        _fill(model, gguf.tensors(), gguf.path)
    else:
        _fill(model, _safetensors(source.path), source.path)
    return model.eval()


@torch.no_grad()
def _random_init(model: LlamaForCausalLM, seed: int) -> None:
    generator = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
    std = getattr(model.config, "initializer_range", 0.02)
    for name, param in model.named_parameters():
        if name.endswith("norm.weight"):
            param.fill_(1.0)
        elif name.endswith("bias"):
            param.zero_()
        else:
            param.normal_(0.0, std, generator=generator)


def _target(model: LlamaForCausalLM, key: str) -> tuple[str, slice | None]:
    """Our parameter name for a checkpoint tensor, and the rows it fills in a fused projection."""
    match = _FUSED.match(key)
    if match is None:
        return key, None
    prefix, _, qkv, gate_up, kind = match.groups()
    if qkv:
        attn = model.get_submodule(f"{prefix}.self_attn")
        q, kv = attn.split[0], attn.split[1]
        start = {"q": 0, "k": q, "v": q + kv}[qkv]
        return f"{prefix}.self_attn.qkv_proj.{kind}", slice(start, start + (q if qkv == "q" else kv))
    inter = model.config.intermediate_size
    start = 0 if gate_up == "gate" else inter
    return f"{prefix}.mlp.gate_up_proj.{kind}", slice(start, start + inter)


def _safetensors(folder: Path) -> Iterator[tuple[str, torch.Tensor]]:
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(f"{folder}: no *.safetensors weights found")
    for file in files:
        with safe_open(str(file), framework="pt", device="cpu") as f:
            for key in f.keys():  # noqa: SIM118 (safe_open is not a dict)
                yield key, f.get_tensor(key)


@torch.no_grad()
def _fill(model: LlamaForCausalLM, tensors: Iterable[tuple[str, torch.Tensor]], where: Path) -> None:
    """Copy checkpoint tensors (Hugging Face names) into the model, cast to its dtype; every weight must come."""
    params = dict(model.named_parameters(remove_duplicate=False))
    filled: dict[str, int] = {}
    for key, src in tensors:
        name, rows = _target(model, key)
        if name not in params:
            raise ModelLoadError(f"{where}: unexpected tensor {key!r} for {model.config.model_type}")
        dst = params[name] if rows is None else params[name][rows]
        if tuple(src.shape) != tuple(dst.shape):
            raise ModelLoadError(f"{where}: {key} has shape {tuple(src.shape)}, expected {tuple(dst.shape)}")
        dst.copy_(src)
        filled[name] = filled.get(name, 0) + src.numel()
    tied = {"lm_head.weight"} if getattr(model.config, "tie_word_embeddings", False) else set()
    missing = [n for n, p in params.items() if filled.get(n, 0) != p.numel() and n not in tied]
    if missing:
        raise ModelLoadError(f"{where}: weights missing for {missing[:5]}")
