"""Model weights kept loaded across engines: a tool that builds engine after engine on one model
(the tuner's worker, trial after trial) loads the weights once. Safe because engines only read them."""

from __future__ import annotations

from typing import Any

import torch

from runtime.config import EngineConfig
from runtime.model.llama import LlamaForCausalLM
from runtime.model.loader import load_model
from runtime.placement import resolve_device, resolve_dtype

__all__ = ["WeightCache"]


class WeightCache:
    """One model's weights at a time, keyed by (name, dtype, seed, device)."""

    def __init__(self) -> None:
        self.key: tuple[Any, ...] | None = None
        self.model: LlamaForCausalLM | None = None

    def get(self, config: EngineConfig) -> tuple[LlamaForCausalLM, bool]:
        """The model for `config`, and whether it was already loaded."""
        device = resolve_device(config.device)
        dtype = resolve_dtype(config.model.dtype, device)
        key = (config.model.name, dtype, config.model.seed, str(device))
        if key == self.key and self.model is not None:
            return self.model, True
        self.model = None  # drop the old weights before loading new ones
        if device.type == "cuda":
            torch.cuda.empty_cache()
        self.model, self.key = load_model(config.model.name, dtype, device, config.model.seed), key
        return self.model, False
