"""Deterministic prompt tokens for replay, built from lengths (no tokenizer needed).

A prompt is described by one of three specs (what a log line can tell us):

- `SyntheticPrompt`: a length, whose leading part is made of named shared segments (a `prefix_id`, or
  one segment per `hash_ids` block); the rest is unique to the request.
- `TextPrompt`: text, tokenized by the caller's tokenizer when given, else by the byte-level
  synthesis below; optionally fitted to a logged length (cut, or extended with unique tokens).
- `TokenPrompt`: the ids themselves.

Synthesis. Token `j` of a segment named `key` is the `j`-th output of a splitmix64 stream whose
seed is the first 8 bytes of blake2b(key), folded into [TOKEN_ID_OFFSET, vocab_size). blake2b and
splitmix64 are fixed integer arithmetic (Python's `hash()` is salted per process, so it is never
used): the same trace gives the same ids on every machine. Two requests that name the same segment
get the same tokens at the same positions, so the runtime's prefix cache sees real hits; the
unique rest of a request is the stream named after its line, which no other request uses.

Byte-level text synthesis: the UTF-8 bytes are cut into 4-byte chunks (the last one padded with 0xFF,
a byte UTF-8 never uses) and each chunk maps to one id through splitmix64. A text of n bytes gives
ceil(n / 4) tokens (~ one token per 4 bytes, like BPE on English), and texts that share a prefix
share its tokens up to the last whole chunk, so shared system prompts hit the prefix cache too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from tuner.traffic.requests import TrafficError

TOKEN_ID_OFFSET = 4  # ids below this are never synthesized: most vocabularies put pad/bos/eos/unk there
BYTES_PER_TEXT_TOKEN = 4

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_TEXT_SEED = np.uint64(0x7061676574756E65)  # "pagetune": the stream byte chunks are mixed into
_PERSON = b"pagetune-tok-v1"  # blake2b personalization: changing it changes every synthesized id


class Segment(NamedTuple):
    key: str  # names the token stream; equal keys give equal tokens
    length: int


@dataclass(frozen=True)
class SyntheticPrompt:
    length: int
    shared: tuple[Segment, ...] = ()  # leading shared segments; their lengths sum to <= length


@dataclass(frozen=True)
class TextPrompt:
    text: str
    length: int | None = None  # a logged length to fit the text's tokens to; None: the text's own
    # chat turns as logged ({"role", "content"} with text content): the model's chat template renders them
    # when a chat tokenizer is given; `text` is their plain rendering, used otherwise
    messages: tuple[dict[str, str], ...] | None = None


@dataclass(frozen=True)
class TokenPrompt:
    token_ids: tuple[int, ...]


Prompt = SyntheticPrompt | TextPrompt | TokenPrompt
Tokenizer = Callable[[str], Sequence[int]]
ChatTokenizer = Callable[[Sequence[dict[str, str]]], Sequence[int]]  # chat turns -> ids through a chat template


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer on uint64 arrays (wrap-around arithmetic is the point)."""
    z = x + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def _seed(key: str) -> np.uint64:
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8, person=_PERSON).digest()
    return np.uint64(int.from_bytes(digest, "little"))


class TokenFactory:
    """Builds prompt token tuples for one vocabulary; holds one int object per id so that millions of
    tokens cost a pointer each (8 bytes), not a fresh Python int each (36 bytes)."""

    def __init__(self, vocab_size: int, tokenizer: Tokenizer | None = None, chat: ChatTokenizer | None = None) -> None:
        self.vocab_size = vocab_size
        self.tokenizer = tokenizer
        self.chat = chat
        self._span = np.uint64(vocab_size - TOKEN_ID_OFFSET)
        self._ints = np.arange(vocab_size).astype(object)  # [vocab] of Python ints

    def stream(self, key: str, start: int, stop: int) -> np.ndarray:
        """Tokens start..stop-1 of the segment named `key`, as int64 (so concatenations never
        promote to float, as int64 with uint64 would)."""
        steps = np.arange(start, max(start, stop), dtype=np.uint64) * _GOLDEN + _seed(key)  # [stop - start]
        return (_splitmix64(steps) % self._span).astype(np.int64) + TOKEN_ID_OFFSET

    def text_ids(self, text: str, messages: Sequence[dict[str, str]] | None = None) -> np.ndarray:
        """The caller's chat tokenizer for chat turns, its tokenizer for text (ids validated), else the
        byte-level synthesis of the text."""
        if messages is not None and self.chat is not None:
            return self._tokenize(lambda: self.chat(messages))  # type: ignore[misc]
        if self.tokenizer is not None:
            return self._tokenize(lambda: self.tokenizer(text))  # type: ignore[misc]
        data = text.encode("utf-8", "surrogatepass")
        pad = -len(data) % BYTES_PER_TEXT_TOKEN
        chunks = np.frombuffer(data + b"\xff" * pad, dtype="<u4").astype(np.uint64)  # [ceil(n/4)]
        return (_splitmix64(chunks ^ _TEXT_SEED) % self._span).astype(np.int64) + TOKEN_ID_OFFSET

    def _tokenize(self, encode: Callable[[], Sequence[int]]) -> np.ndarray:
        try:
            ids = list(encode())
        except TrafficError:  # the tokenizer itself cannot work: not this line's fault
            raise
        except Exception as e:  # the caller's code: report it against the line, never as a traceback
            raise ValueError(f"the tokenizer failed: {type(e).__name__}: {e}") from None
        for t in ids:
            if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or not 0 <= t < self.vocab_size:
                raise ValueError(f"the tokenizer returned {t!r}, not an id in [0, {self.vocab_size})")
        return np.asarray(ids, dtype=np.int64)

    def realize(self, prompt: Prompt, unique_key: str) -> SyntheticPrompt | TokenPrompt:
        """Tokenize a text prompt (fitted to its logged length) and check explicit ids against the
        vocabulary; raises ValueError with the reason. Done once per request, before any truncation."""
        if isinstance(prompt, TokenPrompt):
            bad = next((t for t in prompt.token_ids if t >= self.vocab_size), None)
            if bad is not None:
                raise ValueError(f"prompt_token_ids has {bad}, outside the vocabulary [0, {self.vocab_size})")
            return prompt
        if isinstance(prompt, SyntheticPrompt):
            return prompt
        ids = self.text_ids(prompt.text, prompt.messages)  # [n]
        if prompt.length is not None:  # the log's count wins: cut, or fill with the request's own tokens
            ids = np.concatenate([ids[: prompt.length], self.stream(unique_key, 0, prompt.length - len(ids))])
        return TokenPrompt(tuple(self._ints[ids]))

    def build(self, prompt: SyntheticPrompt | TokenPrompt, keep: int, unique_key: str) -> tuple[int, ...]:
        """The first `keep` tokens of a realized prompt; `unique_key` names the request's own stream."""
        if isinstance(prompt, TokenPrompt):
            return prompt.token_ids[:keep]
        parts, used = [], 0
        for seg in prompt.shared:
            take = min(seg.length, keep - used)
            if take <= 0:
                break
            parts.append(self.stream(seg.key, 0, take))
            used += take
        parts.append(self.stream(unique_key, 0, keep - used))
        return tuple(self._ints[np.concatenate(parts)])  # [keep]


def prompt_length(prompt: SyntheticPrompt | TokenPrompt) -> int:
    return prompt.length if isinstance(prompt, SyntheticPrompt) else len(prompt.token_ids)
