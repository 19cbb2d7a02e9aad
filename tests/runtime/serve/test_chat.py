"""The server on a real model (smollm2-135m: tokenizer, chat template) through the official `openai` client: the
server's process makes the text from the engine process's token deltas, as the offline engine makes it."""

from __future__ import annotations

import openai
import pytest

from runtime import LLMEngine, SamplingParams
from runtime.model.tokenizer import encode_chat
from tests.runtime.serve.server_factories import running_server, server_config, wait_idle
from tests.runtime.test_text import FRANCE, ONCE, ONCE_TEXT

FRANCE_TEXT = "The capital of France is Paris."


@pytest.fixture(scope="module")
def served(smollm2_gguf):
    """A server on smollm2 (the offline reference's config), its engine in a child process that loads it (the
    file fetched first: this module may run before any other that asks for it)."""
    config = server_config("smollm2-135m", dtype="float32", device_memory_gb=1.0, max_model_len=1024)
    with running_server(config) as s:
        yield s


@pytest.fixture(scope="module")
def client(served):
    return openai.OpenAI(base_url=served.base_url, api_key="unused", max_retries=0)


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


def _stream_text(stream) -> tuple[dict[int, str], dict[int, str]]:
    """Per choice index: the joined text, and the last finish reason."""
    texts, finish = {}, {}
    for chunk in stream:
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + (c.text if hasattr(c, "text") else c.delta.content or "")
            finish[c.index] = c.finish_reason or finish.get(c.index)
    return texts, finish


@pytest.mark.parametrize("stream", [False, True])
def test_a_stop_string_cuts_the_greedy_text_and_frees_the_blocks(served, client, stream):
    """Greedy with stop strings is the greedy text without them, cut before the first to start (after it when
    kept); the engine aborts the request at once: the server drains."""
    cases = [({"stop": ["metropolis", "Nova H"]}, ", the city of "),
             ({"stop": "Nova H", "extra_body": {"include_stop_str_in_output": True}}, ", the city of Nova H"),
             ({"stop": ["zebra"]}, ONCE_TEXT)]
    for kwargs, expected in cases:
        out = client.completions.create(model="smollm2-135m", prompt=ONCE, max_tokens=24, temperature=0.0,
                                        stream=stream, **kwargs)
        texts, finish = _stream_text(out) if stream else ({0: out.choices[0].text}, {0: out.choices[0].finish_reason})
        assert (texts, finish) == ({0: expected}, {0: "length" if expected == ONCE_TEXT else "stop"})
    chat = client.chat.completions.create(model="smollm2-135m", messages=FRANCE, max_tokens=24, temperature=0.0,
                                          stop=[" is"], stream=stream)
    texts, finish = _stream_text(chat) if stream else ({0: chat.choices[0].message.content},
                                                       {0: chat.choices[0].finish_reason})
    assert (texts, finish) == ({0: "The capital of France"}, {0: "stop"})
    wait_idle(served)


@pytest.mark.parametrize("stream", [False, True])
def test_n_greedy_choices_are_the_same_text_each_with_its_index(client, stream):
    out = client.chat.completions.create(model="smollm2-135m", messages=FRANCE, max_tokens=24, temperature=0.0, n=3,
                                         stream=stream)
    if stream:
        assert _stream_text(out) == ({i: FRANCE_TEXT for i in range(3)}, {i: "stop" for i in range(3)})
    else:
        assert [(c.index, c.message.content, c.finish_reason) for c in out.choices] == \
            [(i, FRANCE_TEXT, "stop") for i in range(3)]
        assert out.usage.completion_tokens == 3 * 8


def test_n_sampled_choices_are_the_offline_engines_and_one_stops_alone(served, client, smollm2_llm):
    """n = 2 seeded samples are the offline engine's two samples; a stop string that ends one choice early leaves
    the other to run to its own end."""
    params = SamplingParams(n=2, temperature=1.0, seed=5, max_tokens=20)
    [offline] = smollm2_llm.generate([ONCE], params, use_tqdm=False)
    texts = [c.text for c in offline.outputs]
    assert texts[0] != texts[1]
    out = client.completions.create(model="smollm2-135m", prompt=ONCE, max_tokens=20, temperature=1.0, seed=5, n=2)
    assert [c.text for c in out.choices] == texts
    word = texts[0].split()[2]  # a word of sample 0 that sample 1 does not have before its end
    assert word not in texts[1]
    out = client.completions.create(model="smollm2-135m", prompt=ONCE, max_tokens=20, temperature=1.0, seed=5, n=2,
                                    stop=[word])
    assert [(c.text, c.finish_reason) for c in out.choices] == [(texts[0][: texts[0].index(word)], "stop"),
                                                                (texts[1], offline.outputs[1].finish_reason)]
    wait_idle(served)


@pytest.fixture(scope="module")
def recorded(smollm2_llm):
    """The greedy answer to FRANCE on the offline engine's weights, with the log_softmax of the model's logits at
    each output token (the engine records them: `record_logprobs`)."""
    engine = LLMEngine(smollm2_llm.config, model=smollm2_llm.engine.model, record_logprobs=True)
    engine.add_request("r", encode_chat(smollm2_llm.tokenizer, FRANCE), SamplingParams(max_tokens=24, temperature=0.0))
    while engine.has_unfinished_requests():
        outs = engine.step()
    return outs[0].outputs[0].token_ids, engine.logprobs["r"]


@pytest.mark.parametrize("stream", [False, True])
def test_chat_logprobs_are_the_models_log_softmax(client, smollm2_llm, recorded, stream):
    """Each token's logprob is the log_softmax of the model's logits at it (to fp32 rounding), the greedy token's is
    the max of its top_logprobs, and the tokens and their bytes spell the answer (and <|im_end|>)."""
    out = client.chat.completions.create(model="smollm2-135m", messages=FRANCE, max_tokens=24, temperature=0.0,
                                         logprobs=True, top_logprobs=3, stream=stream)
    chunks = list(out) if stream else [out]
    content = [item for c in chunks for choice in c.choices if choice.logprobs for item in choice.logprobs.content]
    ids, rows = recorded
    tokenizer = smollm2_llm.tokenizer
    assert [item.token for item in content] == [tokenizer.decode([t]) for t in ids]
    assert "".join(item.token for item in content) == FRANCE_TEXT + "<|im_end|>"
    assert all(bytes(item.bytes).decode() == item.token for item in content)
    for item, token, row in zip(content, ids, rows):
        assert item.logprob == pytest.approx(row[token].item(), abs=1e-5)
        assert item.logprob == max(t.logprob for t in item.top_logprobs) == item.top_logprobs[0].logprob
        top = row.topk(3)
        assert [t.token for t in item.top_logprobs] == [tokenizer.decode([t]) for t in top.indices.tolist()]
        assert [t.logprob for t in item.top_logprobs] == pytest.approx(top.values.tolist(), abs=1e-5)
    total = sum(item.logprob for item in content)
    assert total == pytest.approx(sum(row[t].item() for row, t in zip(rows, ids)), abs=1e-4)


@pytest.mark.parametrize("stream", [False, True])
def test_completion_logprobs_in_the_legacy_shape(client, stream):
    out = client.completions.create(model="smollm2-135m", prompt=ONCE, max_tokens=8, temperature=0.0, logprobs=2,
                                    stream=stream)
    chunks = list(out) if stream else [out]
    tokens, token_logprobs, tops, offsets = [], [], [], []
    for chunk in chunks:
        lp = chunk.choices[0].logprobs
        tokens += lp.tokens
        token_logprobs += lp.token_logprobs
        tops += lp.top_logprobs
        offsets += lp.text_offset
    assert "".join(tokens) == ONCE_TEXT[: len("".join(tokens))] and len(tokens) == 8
    assert offsets == [len("".join(tokens[:i])) for i in range(8)]
    assert all(len(top) == 2 and lp == max(top.values()) == top[t] for lp, top, t in zip(token_logprobs, tops, tokens))
