"""The server with the official `openai` client on a tokenizer-less model (tiny: token-id prompts, token-id text):
completions plain and streamed, 64 concurrent streams, disconnects, malformed bodies, overload, metrics; each
with the engine in its own process (the default) and on a thread of the server's process."""

from __future__ import annotations

import asyncio

import httpx2
import openai
import pytest

from runtime import LLM, SamplingParams
from runtime.serve.protocol import token_text
from tests.factories import greedy
from tests.runtime.serve.server_factories import running_server, server_config, wait_idle

CONFIG = server_config("tiny", max_num_seqs=64)
IGNORE_EOS = {"ignore_eos": True}


@pytest.fixture(scope="module")
def offline():
    return LLM(config=CONFIG)


@pytest.fixture(scope="module", params=["process", "thread"])
def served(request, offline):
    """The server in each engine mode (the thread reuses the offline engine's weights)."""
    model = offline.engine.model if request.param == "thread" else None
    with running_server(CONFIG, mode=request.param, model=model) as s:
        yield s


@pytest.fixture(scope="module")
def reference(offline):
    """The offline engine on the same config: what the server must answer, token for token."""
    return lambda prompts, lengths: [o.outputs[0].token_ids for o in offline.generate(
        prompt_token_ids=prompts, sampling_params=[greedy(n) for n in lengths], use_tqdm=False)]


@pytest.fixture
def client(served):
    return openai.OpenAI(base_url=served.base_url, api_key="unused", max_retries=0)


def _prompt(i: int) -> list[int]:
    return [3 + (7 * i + j) % 2000 for j in range(5 + i % 11)]


def _metric(text: str, name: str) -> float:
    [value] = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " ")]
    return value


def test_completion_text_is_the_token_ids(client, reference):
    out = client.completions.create(model="tiny", prompt=[5, 6, 7], max_tokens=4, temperature=0.0,
                                    extra_body=IGNORE_EOS)
    [expected] = reference([[5, 6, 7]], [4])
    assert out.choices[0].text == token_text(expected)
    assert out.choices[0].finish_reason == "length"
    assert (out.usage.prompt_tokens, out.usage.completion_tokens, out.usage.total_tokens) == (3, 4, 7)
    assert out.model == "tiny" and out.object == "text_completion"


def test_stream_deltas_continue_the_text_then_usage_comes_last(client, reference):
    stream = client.completions.create(model="tiny", prompt=[9, 8, 7, 6], max_tokens=5, temperature=0.0,
                                       stream=True, stream_options={"include_usage": True}, extra_body=IGNORE_EOS)
    chunks = list(stream)
    [expected] = reference([[9, 8, 7, 6]], [5])
    # one chunk per token, unless the event loop fell behind the engine (then chunks merge: see outputs())
    assert "".join(c.choices[0].text for c in chunks[:-1]) == token_text(expected)
    assert [c.choices[0].finish_reason for c in chunks[:-1]][-1] == "length" and 1 <= len(chunks) - 1 <= 5
    assert chunks[-1].choices == [] and (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (4, 5)


def test_64_concurrent_streams_each_get_their_own_tokens(served, reference):
    prompts = [_prompt(i) for i in range(64)]
    lengths = [4 + i % 13 for i in range(64)]

    async def one(client, prompt, n):
        stream = await client.completions.create(model="tiny", prompt=prompt, max_tokens=n, temperature=0.0,
                                                 stream=True, extra_body=IGNORE_EOS)
        return "".join([c.choices[0].text async for c in stream])

    async def main():
        client = openai.AsyncOpenAI(base_url=served.base_url, api_key="unused", max_retries=0)
        return await asyncio.gather(*(one(client, p, n) for p, n in zip(prompts, lengths)))

    texts = asyncio.run(main())
    assert [len(t.split()) for t in texts] == lengths
    assert texts == [token_text(ids) for ids in reference(prompts, lengths)]
    wait_idle(served)
    assert httpx2.get(served.base_url.removesuffix("/v1") + "/health").status_code == 200


def test_disconnect_mid_stream_aborts_the_request_and_frees_its_blocks(served, client):
    root = served.base_url.removesuffix("/v1")
    before = _metric(httpx2.get(root + "/metrics").text, "pagetune:request_success_total")
    stream = client.completions.create(model="tiny", prompt=_prompt(3), max_tokens=3000, stream=True,
                                       extra_body=IGNORE_EOS)
    first = [next(stream) for _ in range(3)]
    stream.close()  # the client leaves after three tokens
    assert all(c.choices[0].text and c.choices[0].finish_reason is None for c in first)
    with pytest.raises(openai.APITimeoutError):  # a plain request whose client gives up
        client.completions.create(model="tiny", prompt=_prompt(4), max_tokens=3000, extra_body=IGNORE_EOS,
                                  timeout=0.5)
    wait_idle(served, timeout_s=5.0)  # unaborted, they would run 20 s; the bookkeeping is checked each step
    metrics = httpx2.get(root + "/metrics").text
    assert _metric(metrics, "pagetune:kv_cache_usage_perc") == 0.0
    assert _metric(metrics, "pagetune:num_requests_running") == 0.0
    assert _metric(metrics, "pagetune:request_success_total") == before  # aborted: not a success
    assert httpx2.get(root + "/health").status_code == 200


MALFORMED = [
    (b"{not json", "malformed request: body.1: JSON decode error"),
    ({"model": "tiny"}, "malformed request: body.prompt: Field required"),
    ({"model": "tiny", "prompt": ["a", "b"]}, "malformed request: body.prompt.str: Input should be a valid string"),
    ({"model": "tiny", "prompt": [1, 2], "max_tokens": 0},
     "malformed request: body.max_tokens: Input should be greater than or equal to 1"),
    ({"model": "tiny", "prompt": [1, 2], "n": 0},
     "malformed request: body.n: Input should be greater than or equal to 1"),
    ({"model": "tiny", "prompt": [1, 2], "logprobs": 21},
     "malformed request: body.logprobs: Input should be less than or equal to 20"),
    ({"model": "tiny", "prompt": [1, 2], "stop": ["\n"]},
     "stop: stop strings need a tokenizer, and the model `tiny` has none (stop_token_ids work without one)"),
    ({"model": "tiny", "prompt": [1, 2], "stop_token_ids": [-1]},
     "stop_token_ids: must be token ids (ints >= 0), got frozenset({-1})"),
    ({"model": "tiny", "prompt": [1, 5000]}, "prompt token ids must be in [0, 2048), got range [1, 5000]"),
    ({"model": "tiny", "prompt": [1] * 4090, "max_tokens": 16},
     "prompt (4090 tokens) + max_tokens (16) = 4106 exceeds max_model_len 4096"),
]


@pytest.mark.parametrize(("body", "message"), MALFORMED)
def test_malformed_bodies_get_400_in_openai_shape(served, body, message):
    kwargs = {"content": body, "headers": {"content-type": "application/json"}} if isinstance(body, bytes) \
        else {"json": body}
    response = httpx2.post(served.base_url + "/completions", **kwargs)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["message"].startswith(message) and (error["type"], error["code"]) == ("invalid_request_error", 400)


def test_text_and_chat_without_a_tokenizer_are_400_and_another_model_404(client):
    with pytest.raises(openai.BadRequestError, match="model 'tiny' has no tokenizer"):
        client.completions.create(model="tiny", prompt="hello")
    with pytest.raises(openai.BadRequestError, match="model 'tiny' has no tokenizer"):
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}])
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    with pytest.raises(openai.BadRequestError, match="tools: not supported by pagetune's server"):
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], tools=[tool])
    with pytest.raises(openai.NotFoundError, match="the model `gpt-4` does not exist"):
        client.completions.create(model="gpt-4", prompt=[1, 2])


def test_models_and_metrics(served, client):
    [model] = client.models.list().data
    assert (model.id, model.owned_by, model.max_model_len) == ("tiny", "pagetune", 4096)
    root = served.base_url.removesuffix("/v1")
    before = httpx2.get(root + "/metrics").text
    client.completions.create(model="tiny", prompt=[4, 4, 4], max_tokens=6, temperature=0.0, extra_body=IGNORE_EOS)
    after = httpx2.get(root + "/metrics").text
    for name, grew in (("pagetune:request_success_total", 1), ("pagetune:generation_tokens_total", 6),
                       ("pagetune:prompt_tokens_total", 3), ("pagetune:time_to_first_token_seconds_count", 1),
                       ("pagetune:time_per_output_token_seconds_count", 1),
                       ('pagetune:e2e_request_latency_seconds_bucket{le="+Inf"}', 1)):
        assert _metric(after, name) - _metric(before, name) == grew, name
    assert "# TYPE pagetune:time_to_first_token_seconds histogram" in after


def test_overload_is_503_beyond_max_pending(offline):
    """Refused at the door, whichever the engine's mode: the thread's server reuses the loaded weights."""
    with running_server(server_config("tiny"), max_pending=2, mode="thread", model=offline.engine.model) as s:
        body = {"model": "tiny", "prompt": [1, 2, 3], "max_tokens": 3000, "stream": True, "ignore_eos": True}
        with httpx2.Client(timeout=30) as http, http.stream("POST", s.base_url + "/completions", json=body) as a, \
                http.stream("POST", s.base_url + "/completions", json=body) as b:
            assert (a.status_code, b.status_code) == (200, 200)
            third = httpx2.post(s.base_url + "/completions", json=body)
            assert third.status_code == 503
            assert third.json()["error"]["message"].startswith("server overloaded: 2 requests in flight")
        wait_idle(s)


def _choices(out, stream: bool) -> list[tuple[int, str, str | None]]:
    """(index, text, finish reason) per choice, from an answer or a stream's chunks."""
    if not stream:
        return [(c.index, c.text, c.finish_reason) for c in out.choices]
    texts, finish = {}, {}
    for chunk in out:
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
            finish[c.index] = c.finish_reason or finish.get(c.index)
    return [(i, texts[i], finish[i]) for i in sorted(texts)]


@pytest.mark.parametrize("stream", [False, True])
def test_stop_token_ids_end_every_choice_at_the_token(client, offline, stream):
    [ref] = offline.generate(prompt_token_ids=[[5, 6, 7]], sampling_params=greedy(8), use_tqdm=False)
    ids = ref.outputs[0].token_ids
    end = ids.index(ids[3])  # the stop id's first place
    out = client.completions.create(model="tiny", prompt=[5, 6, 7], max_tokens=8, temperature=0.0, n=2, stream=stream,
                                    extra_body={**IGNORE_EOS, "stop_token_ids": [ids[3]]})
    assert _choices(out, stream) == [(i, token_text(ids[: end + 1]), "stop") for i in range(2)]


@pytest.mark.parametrize("stream", [False, True])
def test_n_seeded_samples_are_the_offline_engines(client, offline, stream):
    params = SamplingParams(n=3, temperature=1.0, seed=7, max_tokens=6, ignore_eos=True)
    [ref] = offline.generate(prompt_token_ids=[[9, 9, 4]], sampling_params=params, use_tqdm=False)
    out = client.completions.create(model="tiny", prompt=[9, 9, 4], max_tokens=6, temperature=1.0, seed=7, n=3,
                                    stream=stream, extra_body=IGNORE_EOS)
    assert _choices(out, stream) == [(c.index, token_text(c.token_ids), "length") for c in ref.outputs]
    assert len({tuple(c.token_ids) for c in ref.outputs}) == 3  # three different samples


def test_completion_logprobs_name_tokens_by_id(client, reference):
    out = client.completions.create(model="tiny", prompt=[5, 6, 7], max_tokens=4, temperature=0.0, logprobs=3,
                                    extra_body=IGNORE_EOS)
    [ids] = reference([[5, 6, 7]], [4])
    lp = out.choices[0].logprobs
    assert lp.tokens == [token_text([t], i) for i, t in enumerate(ids)] and "".join(lp.tokens) == out.choices[0].text
    assert lp.text_offset == [len(token_text(ids[:i])) for i in range(4)]
    assert all(len(top) == 3 and value == max(top.values()) for value, top in zip(lp.token_logprobs, lp.top_logprobs))
