"""The server on a real model (smollm2-135m: tokenizer, chat template) through the official `openai` client: the
server's process makes the text from the engine process's token deltas, as the offline engine makes it."""

from __future__ import annotations

import openai
import pytest

from runtime import SamplingParams
from tests.runtime.serve.server_factories import running_server, server_config
from tests.runtime.test_text import FRANCE


@pytest.fixture(scope="module")
def client(smollm2_gguf):
    """A server on smollm2 (the offline reference's config), its engine in a child process that loads it (the
    file fetched first: this module may run before any other that asks for it)."""
    config = server_config("smollm2-135m", dtype="float32", device_memory_gb=1.0, max_model_len=1024)
    with running_server(config) as served:
        yield openai.OpenAI(base_url=served.base_url, api_key="unused", max_retries=0)


def test_chat_answers_the_france_question(client):
    out = client.chat.completions.create(model="smollm2-135m", messages=FRANCE, max_tokens=24, temperature=0.0)
    assert out.choices[0].message.content == "The capital of France is Paris."
    assert (out.choices[0].finish_reason, out.choices[0].message.role) == ("stop", "assistant")
    assert out.usage.completion_tokens == 8  # seven text tokens and <|im_end|>


def test_streamed_chat_deltas_join_to_the_answer(client):
    stream = client.chat.completions.create(model="smollm2-135m", messages=FRANCE, max_tokens=24, temperature=0.0,
                                            stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "The capital of France is Paris."
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.completion_tokens == 8


def test_text_completion_equals_the_offline_engine(client, smollm2_llm):
    [expected] = smollm2_llm.generate(["Once upon a time"], SamplingParams(max_tokens=16, temperature=0.0),
                                      use_tqdm=False)
    out = client.completions.create(model="smollm2-135m", prompt="Once upon a time", max_tokens=16, temperature=0.0)
    assert out.choices[0].text == expected.outputs[0].text
    stream = client.completions.create(model="smollm2-135m", prompt="Once upon a time", max_tokens=16,
                                       temperature=0.0, stream=True)
    assert "".join(c.choices[0].text for c in stream) == expected.outputs[0].text
