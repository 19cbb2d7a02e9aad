"""The OpenAI wire format the server speaks: request bodies (validated by pydantic), responses, errors.

Supported: `/v1/completions` (`prompt`: one text, or one list of token ids) and `/v1/chat/completions`
(string contents); `max_tokens` (chat: `max_completion_tokens` too), `temperature`, `top_p`, `seed`, `n`,
`stop`, `stream`, `stream_options.include_usage`, logprobs (chat: `logprobs` and `top_logprobs`; completions:
`logprobs: int`, both up to 20 as vLLM's default `max_logprobs`), and vLLM's extras `top_k`, `ignore_eos`,
`stop_token_ids` and `include_stop_str_in_output`. Fields the runtime cannot honour (`echo`, batched
prompts, tools) are a 400 rather than silently ignored; unknown fields are ignored, as OpenAI's own server
does with new clients.

Text without a tokenizer (the random-weight presets, e.g. `tiny`): prompts must be token ids, chat is
a 400, and a choice's `text` is the generated token ids in decimal separated by single spaces
("17 4 99"); streamed deltas continue that string (" 4"), so the deltas concatenate to it. There stop
strings are a 400 (`stop_token_ids` work, and the stop id stays in the text), and logprobs name tokens so.
A stream's chunks carry one `created` (the stream's start), as OpenAI's do.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ChatRequest", "CompletionRequest", "SamplingFields", "Unsupported", "error_body", "token_text"]


MAX_N = 128  # samples per request
MAX_LOGPROBS = 20  # top logprobs per token (vLLM's default max_logprobs; OpenAI's chat allows 20)


class Unsupported(ValueError):
    """A well-formed request asks for something the runtime does not do: a 400 naming the field."""


class StreamOptions(BaseModel):
    include_usage: bool = False


class SamplingFields(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=-1)  # vLLM's extra: -1 or 0 disable it
    seed: int | None = None
    n: int = Field(1, ge=1, le=MAX_N)
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    # vLLM's extras (OpenAI clients send them in `extra_body`)
    ignore_eos: bool = False
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False

    def check_supported(self) -> None:
        """Raises `Unsupported` for a field the server does not serve."""

    @property
    def sample_logprobs(self) -> int | None:
        """`SamplingParams.logprobs`: how many top tokens' logprobs per token; None: no logprobs."""
        return None

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


class CompletionRequest(SamplingFields):
    prompt: str | list[int] = Field(union_mode="left_to_right")
    max_tokens: int = Field(16, ge=1)  # OpenAI's default for completions
    echo: bool = False
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)

    def check_supported(self) -> None:
        super().check_supported()
        if self.echo:
            raise Unsupported("echo: not supported by pagetune's server")

    @property
    def sample_logprobs(self) -> int | None:
        return self.logprobs


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str


class ChatRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)  # None: up to max_model_len
    max_completion_tokens: int | None = Field(None, ge=1)
    tools: Any = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)

    def check_supported(self) -> None:
        super().check_supported()
        if self.tools:
            raise Unsupported("tools: not supported by pagetune's server")
        if self.top_logprobs is not None and not self.logprobs:
            raise Unsupported("top_logprobs: needs logprobs: true")

    @property
    def sample_logprobs(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None

    @property
    def token_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


def error_body(message: str, status: int, kind: str = "invalid_request_error", param: str | None = None) -> dict:
    """OpenAI's error shape: {"error": {"message", "type", "param", "code"}}."""
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def token_text(token_ids: list[int], after: int = 0) -> str:
    """The text of generated tokens without a tokenizer: the ids in decimal, space-separated. After `after`
    earlier ids: the piece that continues their text (a stream's delta, with its leading space)."""
    piece = " ".join(map(str, token_ids))
    return " " + piece if after and piece else piece


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def completion_choice(index: int, text: str, finish: str | None, logprobs: dict | None = None) -> dict:
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}


def chat_choice(index: int, text: str, finish: str | None, logprobs: dict | None = None) -> dict:
    return {"index": index, "message": {"role": "assistant", "content": text}, "logprobs": logprobs,
            "finish_reason": finish}


def completion(rid: str, model: str, choices: list[dict], prompt_tokens: int, tokens: int) -> dict:
    return {"id": rid, "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": choices, "usage": usage(prompt_tokens, tokens)}


def chat(rid: str, model: str, choices: list[dict], prompt_tokens: int, tokens: int) -> dict:
    return {"id": rid, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": choices, "usage": usage(prompt_tokens, tokens)}


def completion_chunk(rid: str, model: str, delta: str, finish: str | None, created: int, index: int = 0,
                     logprobs: Any = None) -> dict:
    return {"id": rid, "object": "text_completion", "created": created, "model": model,
            "choices": [{"index": index, "text": delta, "logprobs": logprobs, "finish_reason": finish}]}


def chat_chunk(rid: str, model: str, delta: dict[str, str], finish: str | None, created: int, index: int = 0,
               logprobs: Any = None) -> dict:
    return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]}


def usage_chunk(rid: str, model: str, kind: str, prompt_tokens: int, tokens: int, created: int) -> dict:
    """The last chunk of a stream with `stream_options.include_usage`: no choices, the usage."""
    return {"id": rid, "object": kind, "created": created, "model": model, "choices": [],
            "usage": usage(prompt_tokens, tokens)}
