"""One request's output on the HTTP side: token deltas to text, text pieces to SSE events.

`TextDeltas` makes the text the offline engine makes (`CompletionOutput.text`): the model's tokenizer
through `IncrementalDetokenizer`, fed each delta as it comes and finished with the last, or without a
tokenizer the ids in decimal (`protocol.token_text`). Its pieces concatenate to the whole text. With stop
strings the text ends before the first (the detokenizer matches them, for the offline engine too), and a
piece holds back what a stop string may still claim. A stop token (EOS, `stop_token_ids`) is in the ids,
not in the text, unless `include_stop_str_in_output`. `Choices` keeps the n samples of a request apart:
each one's text, finish reason and logprobs, and ends a sample when its text stopped.

`ChunkTemplate` writes a stream's chunk events without building or walking a dict per chunk: the chunk
JSON is dumped once per stream, with markers where the delta and the finish reason go, and split there:

    data: {"id": "cmpl-7", ..., "text": "17", "logprobs": null, "finish_reason": null}]}
    '-------------- head --------------''--''-- middle --''--''--- middle2 ---''--''-'
                                       delta            logprobs            finish tail

so an event is `head + json.dumps(delta) + middle + json.dumps(logprobs) + middle2 + json.dumps(finish) +
tail`: the same bytes as `json.dumps` of the whole chunk (a test compares them).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from runtime.outputs import TokenLogprob
from runtime.sampling_params import SamplingParams
from runtime.serve.protocol import token_text

if TYPE_CHECKING:
    from runtime.detokenizer import IncrementalDetokenizer
    from runtime.model.tokenizer import Tokenizer
    from runtime.serve.engine_core import Delta

__all__ = ["ChoiceUpdate", "Choices", "ChunkTemplate", "TextDeltas"]

_DELTA, _LOGPROBS, _FINISH = "\x00delta\x00", "\x00logprobs\x00", "\x00finish\x00"  # markers no model name, id
# or text brings (NUL)


class TextDeltas:
    """A sample's output text, one piece per delta of token ids; with `stops`, cut at the first stop string."""

    def __init__(self, tokenizer: Tokenizer | None, skip_special_tokens: bool = True, stops: tuple[str, ...] = (),
                 include_stop_str_in_output: bool = False) -> None:
        self.tokens = 0  # token ids taken so far
        self.pieces: list[str] = []
        self.keep_stop = include_stop_str_in_output
        self._detok: IncrementalDetokenizer | None = None
        if tokenizer is not None:
            from runtime.detokenizer import IncrementalDetokenizer  # transformers: only with a tokenizer

            self._detok = IncrementalDetokenizer(tokenizer, skip_special_tokens, stops, include_stop_str_in_output)

    def add(self, token_ids: list[int], finish_reason: str | None) -> str:
        """The text `token_ids` add ("" while the tokenizer waits for the rest of a character, or holds back
        what may start a stop string); `finish_reason`: the engine's, None while the sample runs."""
        if self._detok is None:
            piece = token_text(token_ids, self.tokens)
        else:
            stop_token = finish_reason == "stop" and not self.keep_stop
            self._detok.add(token_ids[:-1] if stop_token else token_ids)
            finished = finish_reason is not None or self._detok.stopped is not None
            if finished:
                self._detok.finish()
            piece = self._detok.next_piece(finished)
        self.tokens += len(token_ids)
        self.pieces.append(piece)
        return piece

    @property
    def stopped(self) -> str | None:
        """The stop string the text ended at."""
        return None if self._detok is None else self._detok.stopped

    @property
    def text(self) -> str:
        return "".join(self.pieces)


class ChoiceUpdate(NamedTuple):
    """What one delta added to one choice."""

    index: int
    text: str  # the new piece of text
    finish_reason: str | None  # the choice's ("stop" at a stop string); None while it runs
    logprobs: list[TokenLogprob]  # of the new tokens (empty unless asked)
    first: int  # how many tokens the choice had before this delta's
    stopped: bool  # a stop string ended the text here, while the engine still runs the sample: abort it


class Choices:
    """A request's n choices as its deltas arrive."""

    def __init__(self, tokenizer: Tokenizer | None, params: SamplingParams) -> None:
        self.texts = [TextDeltas(tokenizer, params.skip_special_tokens, params.stop, params.include_stop_str_in_output)
                      for _ in range(params.n)]
        self.finish_reasons: list[str | None] = [None] * params.n
        self.logprobs: list[list[TokenLogprob] | None] = [None if params.logprobs is None else []
                                                          for _ in range(params.n)]

    def add(self, delta: Delta) -> ChoiceUpdate | None:
        """None for a choice that ended already: the tokens the engine sampled after its stop string."""
        i = delta.index
        if self.finish_reasons[i] is not None:
            return None
        text = self.texts[i]
        first = text.tokens
        piece = text.add(delta.token_ids, delta.finish_reason)
        stopped = text.stopped is not None and delta.finish_reason is None
        self.finish_reasons[i] = "stop" if text.stopped is not None else delta.finish_reason
        logprobs = delta.logprobs or []
        if self.logprobs[i] is not None:
            self.logprobs[i] += logprobs
        return ChoiceUpdate(i, piece, self.finish_reasons[i], logprobs, first, stopped)

    @property
    def done(self) -> bool:
        return all(f is not None for f in self.finish_reasons)

    @property
    def tokens(self) -> int:
        return sum(t.tokens for t in self.texts)


class ChunkTemplate(NamedTuple):
    """A stream's chunk event with holes for the delta text and the finish reason."""

    head: str
    middle: str
    middle2: str
    tail: str

    @classmethod
    def of(cls, chunk: Callable[[str, str | None, Any], dict]) -> ChunkTemplate:
        """From `chunk(delta, finish, logprobs)`, the stream's chunk as a dict."""
        head, rest = json.dumps(chunk(_DELTA, _FINISH, _LOGPROBS)).split(json.dumps(_DELTA))
        middle, rest = rest.split(json.dumps(_LOGPROBS))
        middle2, tail = rest.split(json.dumps(_FINISH))
        return cls("data: " + head, middle, middle2, tail + "\n\n")

    def event(self, delta: str, finish: str | None, logprobs: dict | None = None) -> bytes:
        finish_json = "null" if finish is None else json.dumps(finish)
        logprobs_json = "null" if logprobs is None else json.dumps(logprobs)
        return (f"{self.head}{json.dumps(delta)}{self.middle}{logprobs_json}{self.middle2}{finish_json}"
                f"{self.tail}").encode()
