"""The offline API, shaped like vLLM's: `LLM(model=..., **knobs).generate(...)`."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from runtime.config import EngineConfig
from runtime.engine import LLMEngine
from runtime.outputs import RequestOutput
from runtime.sampling_params import RequestOutputKind, SamplingParams


class LLM:
    def __init__(self, model: str = "tiny", **engine_knobs: Any) -> None:
        self.config = engine_knobs.pop("config", None) or EngineConfig.from_flat(model, **engine_knobs)
        self.engine = LLMEngine(self.config)
        self._calls = itertools.count()  # request ids stay unique across generate() calls

    @classmethod
    def from_config(cls, config: str | Path | Mapping[str, Any] | EngineConfig) -> LLM:
        """From a runtime YAML (a pagetune `best.yaml` too), a nested mapping, or an EngineConfig."""
        if isinstance(config, str | Path):
            config = EngineConfig.from_yaml(config)
        elif isinstance(config, Mapping):
            config = EngineConfig.from_mapping(config)
        return cls(config=config)

    def generate(self, prompt_token_ids: Sequence[Sequence[int]],
                 sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
                 use_tqdm: bool = True) -> list[RequestOutput]:
        """Run every prompt to completion; outputs come back in the order of the prompts."""
        params = sampling_params if isinstance(sampling_params, Sequence) else [sampling_params] * len(prompt_token_ids)
        if len(params) != len(prompt_token_ids):
            raise ValueError(f"got {len(params)} sampling params for {len(prompt_token_ids)} prompts")
        call = next(self._calls)
        ids = [f"gen-{call}-{i}" for i in range(len(prompt_token_ids))]
        for rid, prompt, p in zip(ids, prompt_token_ids, params):
            # Only the finished outputs are read here: the engine builds no per-step outputs (as vLLM's LLM does).
            final = dataclasses.replace(p or SamplingParams(), output_kind=RequestOutputKind.FINAL_ONLY)
            self.engine.add_request(rid, list(prompt), final)
        done: dict[str, RequestOutput] = {}
        with tqdm(total=len(ids), desc="generate", unit="req", disable=not use_tqdm) as bar:
            while len(done) < len(ids):
                for out in self.engine.step():
                    if out.finished and out.request_id not in done:
                        done[out.request_id] = out
                        bar.update(1)
        return [done[rid] for rid in ids]
