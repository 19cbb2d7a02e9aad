"""Output text, decoded a few tokens at a time as they arrive.

Decoding only the newest token is wrong twice over: a byte-level tokenizer splits one character (an
emoji, a CJK ideograph) over several tokens, and a SentencePiece tokenizer drops the leading space of
whichever token starts the decoded list. So the detokenizer keeps a window of the tokens whose text
it already emitted and decodes the window with the new tokens behind it:

    tokens:  t0 t1 t2 t3 | t4 t5 | t6 t7         (| marks prefix_offset and read_offset)
                           ^^^^^ already emitted, decoded again as context
                                   ^^^^^ new: text = decode(t4..t7) minus decode(t4..t5)

When that text ends in U+FFFD, a character is still incomplete: nothing is emitted and the window
waits for more tokens. `finish()` emits what is held back (U+FFFD included, as a full decode shows it),
so the pieces always add up to `tokenizer.decode(token_ids)`.

Stop strings are matched here, where the text is made, for the offline engine and the server alike (vLLM
v1 matches them in its output processor, beside its detokenizer): `find_stop` looks for a stop string
ending in the newest characters, and the text is cut before it (after it with
`include_stop_str_in_output`). A stream holds back the last `len(longest stop) - 1` characters until the
end (`next_piece`), so it never sends the start of a stop string that the next token completes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from runtime.model.tokenizer import Tokenizer

_INCOMPLETE = "\ufffd"


class StopMatch(NamedTuple):
    stop: str  # the stop string found
    end: int  # the output text is text[:end]: before the stop string, or after it when it is kept


def find_stop(text: str, new_chars: int, stops: Sequence[str], keep: bool) -> StopMatch | None:
    """The stop string that starts first among those ending in the last `new_chars` characters of `text`
    (earlier ones were looked for when their characters were new); `keep`: the text ends after it."""
    best: StopMatch | None = None
    for stop in stops:
        start = text.find(stop, max(0, len(text) - new_chars - len(stop) + 1))
        if start != -1 and (best is None or start < best.end):
            best = StopMatch(stop, start)
    return best if best is None or not keep else StopMatch(best.stop, best.end + len(best.stop))


class IncrementalDetokenizer:
    """The text of one sequence's output tokens; `add` new ids as they come, `finish` at the end.

    With `stops`, the text ends at the first stop string (`stopped` names it) and ignores later tokens."""

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = True, stops: Sequence[str] = (),
                 include_stop_str_in_output: bool = False) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.stops = tuple(stops)
        self.keep_stop = include_stop_str_in_output
        self.token_ids: list[int] = []
        self.text = ""
        self.stopped: str | None = None  # the stop string the text was cut at
        self.prefix_offset = 0  # the window starts here: tokens decoded again only as context
        self.read_offset = 0  # tokens before this have their text in `self.text`
        self.sent = 0  # characters of `self.text` already handed out by `next_piece`
        self.hold_back = max(map(len, self.stops)) - 1 if self.stops and not self.keep_stop else 0

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens) if ids else ""

    def add(self, new_ids: Sequence[int]) -> str:
        """Take the next token ids; returns the text they complete ("" while a character is unfinished).
        After a stop string the text is cut and the ids are ignored: read `text`, not the pieces."""
        if self.stopped is not None:
            return ""
        self.token_ids.extend(new_ids)
        return self._emit(final=False)

    def next_piece(self, finished: bool) -> str:
        """The text not handed out yet, less the characters a stop string may still claim (none once finished)."""
        end = len(self.text) - (0 if finished or self.stopped is not None else self.hold_back)
        if end <= self.sent:
            return ""
        piece, self.sent = self.text[self.sent : end], end
        return piece

    def finish(self) -> str:
        """No more tokens: returns the text still held back (an unfinished character decodes as U+FFFD)."""
        return self._emit(final=True)

    def _emit(self, final: bool) -> str:
        if self.read_offset == len(self.token_ids) or self.stopped is not None:
            return ""
        context = self._decode(self.token_ids[self.prefix_offset : self.read_offset])
        full = self._decode(self.token_ids[self.prefix_offset :])
        if not final and (len(full) <= len(context) or full.endswith(_INCOMPLETE)):
            return ""
        piece = full[len(context) :]
        self.text += piece
        self.prefix_offset, self.read_offset = self.read_offset, len(self.token_ids)
        if self.stops and piece:
            match = find_stop(self.text, len(piece), self.stops, self.keep_stop)
            if match is not None:
                self.text, self.stopped = self.text[: match.end], match.stop
        return piece
