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
"""

from __future__ import annotations

from collections.abc import Sequence

from runtime.model.tokenizer import Tokenizer

_INCOMPLETE = "\ufffd"


class IncrementalDetokenizer:
    """The text of one sequence's output tokens; `add` new ids as they come, `finish` at the end."""

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = True) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.token_ids: list[int] = []
        self.text = ""
        self.prefix_offset = 0  # the window starts here: tokens decoded again only as context
        self.read_offset = 0  # tokens before this have their text in `self.text`

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens) if ids else ""

    def add(self, new_ids: Sequence[int]) -> str:
        """Take the next token ids; returns the text they complete ("" while a character is unfinished)."""
        self.token_ids.extend(new_ids)
        return self._emit(final=False)

    def finish(self) -> str:
        """No more tokens: returns the text still held back (an unfinished character decodes as U+FFFD)."""
        return self._emit(final=True)

    def _emit(self, final: bool) -> str:
        if self.read_offset == len(self.token_ids):
            return ""
        context = self._decode(self.token_ids[self.prefix_offset : self.read_offset])
        full = self._decode(self.token_ids[self.prefix_offset :])
        if not final and (len(full) <= len(context) or full.endswith(_INCOMPLETE)):
            return ""
        piece = full[len(context) :]
        self.text += piece
        self.prefix_offset, self.read_offset = self.read_offset, len(self.token_ids)
        return piece
