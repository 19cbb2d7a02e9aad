"""Traffic text through the model's own tokenizer and chat template, in a child process."""

from __future__ import annotations

import pytest

from runtime import encode_chat, has_tokenizer, load_tokenizer
from tests.tuner.traffic.traffic_factories import jline
from tuner.model_tokenizer import ModelTokenizer
from tuner.traffic import TrafficError, load_traffic

CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def smol(smollm2_gguf):
    with ModelTokenizer("smollm2-135m") as tok:
        yield tok, load_tokenizer("smollm2-135m")


def test_presets_have_no_tokenizer_and_the_gguf_model_has_one(smollm2_gguf):
    assert (has_tokenizer("tiny"), has_tokenizer("smollm2-135m")) == (False, True)


def test_the_child_encodes_exactly_as_the_model_tokenizer(smol):
    tok, reference = smol
    assert tok.encode("Hello world") == [19556, 905] == reference("Hello world")["input_ids"]
    assert tok.chat(CHAT) == encode_chat(reference, CHAT)
    with pytest.raises(ValueError, match=r"UndefinedError: .* no attribute .role."):
        tok.chat([{"content": "no role"}])


def test_logged_chats_and_native_text_take_the_model_tokens(smol, tmp_path):
    tok, reference = smol
    chat_ids = encode_chat(reference, CHAT)
    log = tmp_path / "chat.jsonl"
    log.write_text(jline(created=1.0, messages=CHAT, usage={"prompt_tokens": len(chat_ids), "completion_tokens": 8})
                   + "\n")
    native = tmp_path / "native.jsonl"
    native.write_text(jline(timestamp=2.0, prompt="Once upon a time", output_tokens=8) + "\n")
    [chat] = load_traffic(log, vocab_size=49152, tokenizer=tok.encode, chat_tokenizer=tok.chat).requests
    [text] = load_traffic(native, vocab_size=49152, tokenizer=tok.encode, chat_tokenizer=tok.chat).requests
    assert list(chat.prompt_token_ids) == chat_ids
    assert list(text.prompt_token_ids) == reference("Once upon a time")["input_ids"]


def test_a_model_whose_tokenizer_cannot_load_is_one_error_not_a_line_error(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"not a gguf file")
    with ModelTokenizer(str(bad)) as tok, pytest.raises(TrafficError, match="could not start"):
        tok.encode("hello")
