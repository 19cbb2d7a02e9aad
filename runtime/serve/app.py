"""The FastAPI app: OpenAI-compatible routes over an `AsyncEngine` (the engine in its own process, or thread).

    POST /v1/completions        text or token-id prompt; JSON, or SSE with `stream: true`
    POST /v1/chat/completions   the model's chat template; JSON or SSE
    GET  /v1/models             the served model, with its max_model_len
    GET  /health                200 while the engine serves, else 503 with its error
    GET  /metrics               Prometheus text (runtime.serve.metrics)

Errors are OpenAI's JSON shape: 400 for a malformed body, an unsupported field, text for a model
without a tokenizer, or a request that can never fit (prompt + max_tokens > max_model_len, said in the
message); 404 for another model's name; 503 when `max_pending` requests are in flight (see
`runtime.serve.async_engine`). A client that disconnects aborts its request: a stream is cancelled by
Starlette when the client leaves, a plain request is watched for the disconnect as vLLM does.
This side makes the text (`runtime.serve.streams`: the tokenizer, or token ids as text), matches stop
strings (a choice whose text stopped is aborted in the engine, so its blocks are freed), writes logprobs
(`runtime.serve.logprobs`) and the SSE events from the engine's token deltas, one choice per sample of
`n`; it needs the model's name, tokenizer and `RequestLimits`, never its weights.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import NamedTuple

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from runtime.config import ConfigError
from runtime.model.tokenizer import NoTokenizerError, Tokenizer, encode_chat, encode_prompt, require_tokenizer
from runtime.sampling_params import SamplingParams
from runtime.serve import protocol as wire
from runtime.serve.async_engine import AsyncEngine, EngineDead, Overloaded
from runtime.serve.engine_core import EngineHandle
from runtime.serve.logprobs import TokenNames, chat_logprobs, completion_logprobs
from runtime.serve.metrics import ServerMetrics
from runtime.serve.streams import Choices, ChoiceUpdate, ChunkTemplate

__all__ = ["ApiError", "build_app"]


class ApiError(Exception):
    """An answer other than 200, in OpenAI's error shape."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


class _Shape(NamedTuple):
    """How one endpoint writes its answers."""

    prefix: str  # of response ids
    chunk_object: str
    full: Callable[..., dict]  # (id, model, choices, prompt tokens, tokens) -> the JSON answer
    choice: Callable[..., dict]  # (index, text, finish, logprobs) -> one choice of the answer
    chunk: Callable[..., dict]  # (id, model, delta, finish, created, index, logprobs) -> one event
    logprobs: Callable[..., dict]  # (TokenLogprobs, TokenNames, first token, first text offset) -> a choice's

    def template(self, rid: str, model: str, created: int, index: int) -> ChunkTemplate:
        return ChunkTemplate.of(lambda delta, finish, logprobs:
                                self.chunk(rid, model, delta, finish, created, index, logprobs))


COMPLETION = _Shape("cmpl", "text_completion", wire.completion, wire.completion_choice, wire.completion_chunk,
                    completion_logprobs)
CHAT = _Shape("chatcmpl", "chat.completion.chunk", wire.chat, wire.chat_choice,
              lambda rid, model, delta, finish, created, index, logprobs:
              wire.chat_chunk(rid, model, {"content": delta}, finish, created, index, logprobs),
              lambda logprobs, names, first, offset: chat_logprobs(logprobs, names, first))


class _Server:
    def __init__(self, handle: EngineHandle, model: str, tokenizer: Tokenizer | None, max_pending: int) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.names = TokenNames(tokenizer)
        self.metrics = ServerMetrics()
        self.runner = AsyncEngine(handle, max_pending, self.metrics.observe)
        self._ids = itertools.count()

    def check_model(self, name: str) -> None:
        if name != self.model:
            raise ApiError(404, f"the model `{name}` does not exist: this server serves `{self.model}`",
                           "NotFoundError")

    def params(self, body: wire.SamplingFields, max_tokens: int) -> SamplingParams:
        if body.stop and self.tokenizer is None:
            raise ApiError(400, f"stop: stop strings need a tokenizer, and the model `{self.model}` has none "
                                "(stop_token_ids work without one)")
        try:
            return SamplingParams(
                n=body.n, temperature=body.temperature, top_p=body.top_p, top_k=max(0, body.top_k), seed=body.seed,
                max_tokens=max_tokens, ignore_eos=body.ignore_eos, stop=body.stop, stop_token_ids=body.stop_token_ids,
                include_stop_str_in_output=body.include_stop_str_in_output, logprobs=body.sample_logprobs)
        except ConfigError as e:
            raise ApiError(400, str(e).removeprefix("SamplingParams.")) from None

    def submit(self, shape: _Shape, prompt: list[int], params: SamplingParams) -> tuple[str, asyncio.Queue]:
        reason = self.runner.limits.reject_reason(prompt, params)
        if reason is not None:
            raise ApiError(400, reason)
        rid = f"{shape.prefix}-{next(self._ids)}"
        try:
            return rid, self.runner.submit(rid, prompt, params)
        except Overloaded as e:
            raise ApiError(503, f"server overloaded: {e}; retry later", "server_overloaded") from None
        except EngineDead as e:
            raise ApiError(503, str(e), "server_error") from None


def _event(payload: dict | str) -> bytes:
    return f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n".encode()


async def _updates(server: _Server, rid: str, q: asyncio.Queue, choices: Choices) -> AsyncIterator[ChoiceUpdate]:
    """The request's choices as its deltas arrive, until each has ended. A choice whose text reached a stop
    string while the engine runs it is aborted there (reason "stop"): the whole request once none runs on."""
    async with contextlib.aclosing(server.runner.outputs(rid, q)) as deltas:
        async for delta in deltas:
            update = choices.add(delta)
            if update is None:
                continue
            if update.stopped:
                server.runner.abort(rid, None if choices.done else update.index, "stop")
            yield update
            if choices.done:
                return


async def _stream(server: _Server, shape: _Shape, rid: str, q: asyncio.Queue, include_usage: bool,
                  prompt_tokens: int, params: SamplingParams) -> AsyncIterator[bytes]:
    """The SSE events of a stream: per delta one chunk, written from its choice's template."""
    created, choices = int(time.time()), Choices(server.tokenizer, params)
    chunks = [shape.template(rid, server.model, created, i) for i in range(params.n)]
    if shape is CHAT:
        for i in range(params.n):
            yield _event(wire.chat_chunk(rid, server.model, {"role": "assistant", "content": ""}, None, created, i))
    offsets = [0] * params.n  # per choice: characters of its token strings so far (completions' text_offset)
    async for update in _updates(server, rid, q, choices):
        logprobs = None
        if params.logprobs is not None:
            logprobs = shape.logprobs(update.logprobs, server.names, update.first, offsets[update.index])
            offsets[update.index] += sum(map(len, logprobs.get("tokens", ())))
        yield chunks[update.index].event(update.text, update.finish_reason, logprobs)
    if include_usage:
        yield _event(wire.usage_chunk(rid, server.model, shape.chunk_object, prompt_tokens, choices.tokens, created))
    yield _event("[DONE]")


async def _until_disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _final(server: _Server, shape: _Shape, rid: str, q: asyncio.Queue, params: SamplingParams
                 ) -> tuple[list[dict], int]:
    """A request's choices, whole, and how many tokens they took."""
    choices = Choices(server.tokenizer, params)
    async for _ in _updates(server, rid, q, choices):
        pass
    out = []
    for i, (text, logprobs) in enumerate(zip(choices.texts, choices.logprobs)):
        written = None if logprobs is None else shape.logprobs(logprobs, server.names, 0, 0)
        out.append(shape.choice(i, text.text, choices.finish_reasons[i], written))
    return out, choices.tokens


async def _answer(server: _Server, request: Request, shape: _Shape, body: wire.SamplingFields, prompt: list[int],
                  params: SamplingParams) -> Response:
    rid, q = server.submit(shape, prompt, params)
    if body.stream:
        return StreamingResponse(_stream(server, shape, rid, q, body.include_usage, len(prompt), params),
                                 media_type="text/event-stream")
    final = asyncio.ensure_future(_final(server, shape, rid, q, params))
    watch = asyncio.ensure_future(_until_disconnect(request))
    await asyncio.wait({final, watch}, return_when=asyncio.FIRST_COMPLETED)
    watch.cancel()
    if not final.done():  # the client left: cancelling aborts the request (AsyncEngine.outputs)
        final.cancel()
        return Response(status_code=499)
    choices, tokens = final.result()
    return JSONResponse(shape.full(rid, server.model, choices, len(prompt), tokens))


def _prompt_ids(server: _Server, prompt: str | list[int]) -> list[int]:
    if isinstance(prompt, list):
        return prompt
    return encode_prompt(require_tokenizer(server.tokenizer, server.model), prompt)


def _routes(app: FastAPI, server: _Server) -> None:
    @app.post("/v1/completions")
    async def completions(body: wire.CompletionRequest, request: Request) -> Response:
        server.check_model(body.model)
        body.check_supported()
        prompt = _prompt_ids(server, body.prompt)
        return await _answer(server, request, COMPLETION, body, prompt, server.params(body, body.max_tokens))

    @app.post("/v1/chat/completions")
    async def chat(body: wire.ChatRequest, request: Request) -> Response:
        server.check_model(body.model)
        body.check_supported()
        tokenizer = require_tokenizer(server.tokenizer, server.model)
        prompt = encode_chat(tokenizer, [m.model_dump() for m in body.messages])
        limit = body.token_limit or max(1, server.runner.limits.max_model_len - len(prompt))
        return await _answer(server, request, CHAT, body, prompt, server.params(body, limit))

    @app.get("/v1/models")
    async def models() -> dict:
        card = {"id": server.model, "object": "model", "created": 0, "owned_by": "pagetune",
                "max_model_len": server.runner.limits.max_model_len}
        return {"object": "list", "data": [card]}

    @app.get("/health")
    async def health() -> Response:
        error = server.runner.error
        return Response(status_code=200) if error is None else PlainTextResponse(error, status_code=503)

    @app.get("/metrics")
    async def metrics() -> Response:
        text = server.metrics.render(server.runner.last_step, server.runner.preempted)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")


def _errors(app: FastAPI) -> None:
    def reply(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
        return JSONResponse(wire.error_body(message, status, kind), status_code=status)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, e: ApiError) -> JSONResponse:
        return reply(e.status, e.message, e.kind)

    @app.exception_handler(RequestValidationError)
    async def malformed(request: Request, e: RequestValidationError) -> JSONResponse:
        problems = [f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors()[:5]]
        return reply(400, "malformed request: " + "; ".join(problems))

    @app.exception_handler(EngineDead)
    async def engine_dead(request: Request, e: EngineDead) -> JSONResponse:
        return reply(503, str(e), "server_error")

    @app.exception_handler(wire.Unsupported)
    @app.exception_handler(NoTokenizerError)
    async def bad_request(request: Request, e: ValueError) -> JSONResponse:
        return reply(400, str(e))


def build_app(handle: EngineHandle, model: str, tokenizer: Tokenizer | None, max_pending: int) -> FastAPI:
    """The app serving `model` on `handle` (owned by the app from now on: it starts and closes with the app's
    lifespan); `tokenizer`: the model's, for text prompts, chat and output text (None: token ids only)."""
    server = _Server(handle, model, tokenizer, max_pending)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        server.runner.start()
        yield
        server.runner.stop()

    app = FastAPI(title="pagetune", lifespan=lifespan)
    app.state.server = server
    _routes(app, server)
    _errors(app)
    return app
