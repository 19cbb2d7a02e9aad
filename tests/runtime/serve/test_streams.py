"""`ChunkTemplate` writes exactly the bytes `json.dumps` writes for a chunk; `TextDeltas` without a tokenizer."""

from __future__ import annotations

import json

import pytest

from runtime.serve import protocol as wire
from runtime.serve.streams import ChunkTemplate, TextDeltas

DELTAS = ["", "17", " 4 99", 'say "hi"\n', "é – 東京 \U0001f600", "\\", "\x00delta\x00"]


def _dumped(chunk: dict) -> bytes:
    """How the server wrote each chunk before templates: the whole dict dumped."""
    return f"data: {json.dumps(chunk)}\n\n".encode()


@pytest.mark.parametrize("delta", DELTAS)
@pytest.mark.parametrize("finish", [None, "length", "stop", "abort"])
def test_a_templated_chunk_is_the_chunk_dumped(delta, finish):
    completion = lambda d, f: wire.completion_chunk("cmpl-7", "tiny", d, f, 1700000000)
    chat = lambda d, f: wire.chat_chunk("chatcmpl-3", 'm/x"y', {"content": d}, f, 1700000001)
    for chunk in (completion, chat):
        assert ChunkTemplate.of(chunk).event(delta, finish) == _dumped(chunk(delta, finish))


def test_token_ids_as_text_continue_across_deltas():
    text = TextDeltas(None)
    assert [text.add(ids, finished) for ids, finished in (([17], False), ([], False), ([4, 99], False), ([5], True))] \
        == ["17", "", " 4 99", " 5"]
    assert (text.text, text.tokens) == (wire.token_text([17, 4, 99, 5]), 4)
