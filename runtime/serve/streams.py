"""One request's output on the HTTP side: token deltas to text, text pieces to SSE events.

`TextDeltas` makes the text the offline engine makes (`CompletionOutput.text`): the model's tokenizer
through `IncrementalDetokenizer`, fed each delta as it comes and finished with the last, or without a
tokenizer the ids in decimal (`protocol.token_text`). Its pieces concatenate to the whole text.

`ChunkTemplate` writes a stream's chunk events without building or walking a dict per chunk: the chunk
JSON is dumped once per stream, with markers where the delta and the finish reason go, and split there:

    data: {"id": "cmpl-7", ..., "text": "17", "logprobs": null, "finish_reason": null}]}
    '-------------- head --------------''--''------------- middle --------------''--''-'
                                       delta                                    finish tail

so an event is `head + json.dumps(delta) + middle + json.dumps(finish) + tail`: the same bytes as
`json.dumps` of the whole chunk (a test compares them).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from runtime.serve.protocol import token_text

if TYPE_CHECKING:
    from runtime.detokenizer import IncrementalDetokenizer
    from runtime.model.tokenizer import Tokenizer

__all__ = ["ChunkTemplate", "TextDeltas"]

_DELTA, _FINISH = "\x00delta\x00", "\x00finish\x00"  # markers no model name, id or text brings (NUL)


class TextDeltas:
    """A request's output text, one piece per delta of token ids."""

    def __init__(self, tokenizer: Tokenizer | None, skip_special_tokens: bool = True) -> None:
        self.tokens = 0  # token ids taken so far
        self.pieces: list[str] = []
        self._detok: IncrementalDetokenizer | None = None
        if tokenizer is not None:
            from runtime.detokenizer import IncrementalDetokenizer  # transformers: only with a tokenizer

            self._detok = IncrementalDetokenizer(tokenizer, skip_special_tokens)

    def add(self, token_ids: list[int], finished: bool) -> str:
        """The text `token_ids` add ("" while the tokenizer waits for the rest of a character)."""
        if self._detok is None:
            piece = token_text(token_ids, self.tokens)
        else:
            piece = self._detok.add(token_ids) + (self._detok.finish() if finished else "")
        self.tokens += len(token_ids)
        self.pieces.append(piece)
        return piece

    @property
    def text(self) -> str:
        return "".join(self.pieces)


class ChunkTemplate(NamedTuple):
    """A stream's chunk event with holes for the delta text and the finish reason."""

    head: str
    middle: str
    tail: str

    @classmethod
    def of(cls, chunk: Callable[[str, str | None], dict]) -> ChunkTemplate:
        """From `chunk(delta, finish)`, the stream's chunk as a dict."""
        head, rest = json.dumps(chunk(_DELTA, _FINISH)).split(json.dumps(_DELTA))
        middle, tail = rest.split(json.dumps(_FINISH))
        return cls("data: " + head, middle, tail + "\n\n")

    def event(self, delta: str, finish: str | None) -> bytes:
        finish_json = "null" if finish is None else json.dumps(finish)
        return f"{self.head}{json.dumps(delta)}{self.middle}{finish_json}{self.tail}".encode()
