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


LOGPROBS = [None, {"content": []}, {"tokens": ["a", "\x00logprobs\x00"], "token_logprobs": [-0.5, -9999.0]}]


@pytest.mark.parametrize("delta", DELTAS)
@pytest.mark.parametrize("finish", [None, "length", "stop", "abort"])
@pytest.mark.parametrize("logprobs", LOGPROBS)
def test_a_templated_chunk_is_the_chunk_dumped(delta, finish, logprobs):
    completion = lambda d, f, lp: wire.completion_chunk("cmpl-7", "tiny", d, f, 1700000000, 2, lp)
    chat = lambda d, f, lp: wire.chat_chunk("chatcmpl-3", 'm/x"y', {"content": d}, f, 1700000001, 0, lp)
    for chunk in (completion, chat):
        assert ChunkTemplate.of(chunk).event(delta, finish, logprobs) == _dumped(chunk(delta, finish, logprobs))


def test_token_ids_as_text_continue_across_deltas():
    text = TextDeltas(None)
    assert [text.add(ids, finish) for ids, finish in (([17], None), ([], None), ([4, 99], None), ([5], "stop"))] \
        == ["17", "", " 4 99", " 5"]
    assert (text.text, text.tokens) == (wire.token_text([17, 4, 99, 5]), 4)
