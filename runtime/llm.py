"""The offline API, shaped like vLLM's: `LLM(model=..., **knobs).generate(...)` and `.chat(...)`."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from runtime.config import EngineConfig
from runtime.engine import LLMEngine
from runtime.model.tokenizer import Message, Tokenizer, encode_chat, encode_prompt, load_tokenizer, require_tokenizer
from runtime.outputs import RequestOutput
from runtime.sampling_params import RequestOutputKind, SamplingParams
from runtime.warmup import warm_up

Params = SamplingParams | Sequence[SamplingParams] | None


class LLM:
    def __init__(self, model: str = "tiny", **engine_knobs: Any) -> None:
        self.config = engine_knobs.pop("config", None) or EngineConfig.from_flat(model, **engine_knobs)
        self.tokenizer: Tokenizer | None = load_tokenizer(self.config.model.name)  # None: presets
        self.engine = LLMEngine(self.config, tokenizer=self.tokenizer)
        if self.engine.runner_on_gpu:
            warm_up(self.engine)  # the first batch compiles nothing
        self._calls = itertools.count()  # request ids stay unique across generate() calls

    @classmethod
    def from_config(cls, config: str | Path | Mapping[str, Any] | EngineConfig) -> LLM:
        """From a runtime YAML (a pagetune `best.yaml` too), a nested mapping, or an EngineConfig."""
        if isinstance(config, str | Path):
            config = EngineConfig.from_yaml(config)
        elif isinstance(config, Mapping):
            config = EngineConfig.from_mapping(config)
        return cls(config=config)

    def generate(self, prompts: str | Sequence[str] | Sequence[Sequence[int]] | None = None,
                 sampling_params: Params = None, use_tqdm: bool = True, *,
                 prompt_token_ids: Sequence[Sequence[int]] | None = None) -> list[RequestOutput]:
        """Run every prompt to completion; outputs come back in the order of the prompts.

        `prompts`: text (tokenized with the model's tokenizer) or token-id lists; or `prompt_token_ids=`.
        """
        if (prompts is None) == (prompt_token_ids is None):
            raise ValueError("pass exactly one of prompts and prompt_token_ids")
        if prompts is not None:
            items = [prompts] if isinstance(prompts, str) else list(prompts)
            prompt_token_ids = [self._encode(p) if isinstance(p, str) else p for p in items]
        return self._run(prompt_token_ids, sampling_params, use_tqdm)

    def chat(self, messages: Sequence[Message] | Sequence[Sequence[Message]], sampling_params: Params = None,
             use_tqdm: bool = True, add_generation_prompt: bool = True) -> list[RequestOutput]:
        """One conversation (a list of {"role", "content"} messages) or a list of them, rendered by the
        model's chat template (with the assistant's turn opened); one output per conversation."""
        conversations = [messages] if messages and isinstance(messages[0], Mapping) else messages
        tokenizer = require_tokenizer(self.tokenizer, self.config.model.name)
        ids = [encode_chat(tokenizer, c, add_generation_prompt) for c in conversations]
        return self._run(ids, sampling_params, use_tqdm)

    def _encode(self, prompt: str) -> list[int]:
        return encode_prompt(require_tokenizer(self.tokenizer, self.config.model.name), prompt)

    def _run(self, prompt_token_ids: Sequence[Sequence[int]], sampling_params: Params,
             use_tqdm: bool) -> list[RequestOutput]:
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
