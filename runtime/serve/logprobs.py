"""Logprobs in OpenAI's shapes, from the engine's `TokenLogprob`s (the raw logits' log-probabilities).

    chat          {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}
    completions   {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}

A token's string is the token decoded alone (special tokens as their text), as vLLM writes it; without a
tokenizer it is the id in decimal as `protocol.token_text` writes the text ("17", then " 4"), so the
tokens concatenate to the text. A logprob of -inf is written -9999.0 (JSON has no infinity), as vLLM does.
`text_offset` counts characters of those token strings from the start of the choice's text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtime.outputs import TokenLogprob
from runtime.serve.protocol import token_text

if TYPE_CHECKING:
    from runtime.model.tokenizer import Tokenizer

__all__ = ["TokenNames", "chat_logprobs", "completion_logprobs"]

FLOOR = -9999.0


class TokenNames:
    """Token id -> its string in logprobs (decoded once per id)."""

    def __init__(self, tokenizer: Tokenizer | None) -> None:
        self.tokenizer = tokenizer
        self._names: dict[int, str] = {}

    def name(self, token_id: int, position: int) -> str:
        """`position`: the token's place in its choice (only a tokenizer-less model's names depend on it)."""
        if self.tokenizer is None:
            return token_text([token_id], position)
        name = self._names.get(token_id)
        if name is None:
            name = self._names[token_id] = self.tokenizer.decode([token_id], skip_special_tokens=False)
        return name


def _entry(token: str, logprob: float) -> dict:
    return {"token": token, "logprob": max(logprob, FLOOR), "bytes": list(token.encode("utf-8"))}


def chat_logprobs(logprobs: list[TokenLogprob], names: TokenNames, first: int) -> dict:
    """The chat shape for tokens `first`, `first + 1`, ... of a choice."""
    content = []
    for pos, lp in enumerate(logprobs, first):
        top = [_entry(names.name(t, pos), v) for t, v in zip(lp.top_ids, lp.top_logprobs)]
        content.append({**_entry(names.name(lp.token_id, pos), lp.logprob), "top_logprobs": top})
    return {"content": content}


def completion_logprobs(logprobs: list[TokenLogprob], names: TokenNames, first: int, offset: int) -> dict:
    """The completions shape for tokens `first`, ... of a choice, whose earlier tokens' strings span `offset`
    characters."""
    tokens, offsets = [], []
    for pos, lp in enumerate(logprobs, first):
        offsets.append(offset)
        tokens.append(names.name(lp.token_id, pos))
        offset += len(tokens[-1])
    return {"tokens": tokens, "token_logprobs": [max(lp.logprob, FLOOR) for lp in logprobs],
            "top_logprobs": [{names.name(t, pos): max(v, FLOOR) for t, v in zip(lp.top_ids, lp.top_logprobs)}
                             for pos, lp in enumerate(logprobs, first)],
            "text_offset": offsets}
