"""OpenAI-style request logs: one JSON object per line, either flat or split into request/response.

    {"created": 1700000000.25, "model": "m", "messages": [{"role": "user", "content": "Hi"}],
     "usage": {"prompt_tokens": 12, "completion_tokens": 30}}
    {"timestamp": "2024-05-01T12:00:00.5Z", "request": {"messages": [...]},
     "response": {"id": "chatcmpl-1", "created": 1714564800, "usage": {...}}}

Each field is looked up at the top level first, then in `request`, then in `response`:
- the time: `timestamp`, else `created`: unix seconds (a number) or an ISO-8601 string (`Z` or an
  offset allowed; none: UTC). Required.
- the prompt: chat `messages` (a non-empty list of `{role, content}`; content is a string, null, or
  a list of parts whose `text` parts count and other parts stand as `[type]`), or a completions
  `prompt` string. Required.
- `usage.prompt_tokens` and `usage.completion_tokens`: required, >= 1. The logged counts win: the
  prompt's tokens come from its text (messages rendered as `<|role|>\\ncontent\\n` each, through the
  caller's tokenizer or the byte-level synthesis), cut or extended with request-unique tokens to
  exactly `prompt_tokens`; so requests that share a system prompt share those tokens.
- `request_id`, else `id`: the request id when present (must be unique in the file).

All other fields (model, temperature, choices, ...) are ignored: logs carry many and none of them
changes what replay sends.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from tuner.traffic.fields import (
    MAX_TIMESTAMP_S,
    LineError,
    LineParser,
    ParsedLine,
    as_length,
    as_list,
    as_str,
    parse_object,
    request_id_of,
    require,
    show,
    to_ns,
)
from tuner.traffic.tokens import TextPrompt

NAME = "openai"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MISSING = object()


def sniff(text: str) -> bool:
    try:
        obj = parse_object(text)
    except LineError:
        return False
    return any(key in obj for key in ("messages", "usage", "request", "response"))


def _lookup(obj: dict[str, Any], key: str) -> Any:
    """The field from the top level, else the `request` object, else the `response` object."""
    for where in (obj, obj.get("request"), obj.get("response")):
        if isinstance(where, dict) and key in where:
            return where[key]
    return _MISSING


class Parser(LineParser):
    """The format has no block ids: `hash_block_size` does not apply."""

    def parse(self, text: str) -> ParsedLine:
        obj = parse_object(text)
        stamp = _lookup(obj, "timestamp")
        stamp = _lookup(obj, "created") if stamp is _MISSING else stamp
        if stamp is _MISSING:
            raise LineError("timestamp (or created) is missing")
        usage = _lookup(obj, "usage")
        if usage is _MISSING:
            raise LineError("usage is missing")
        if not isinstance(usage, dict):
            raise LineError(f"usage must be an object, got {show(usage)}")
        prompt_tokens, output = (_usage_count(usage, key) for key in ("prompt_tokens", "completion_tokens"))
        request_id = _lookup(obj, "request_id")
        request_id = _lookup(obj, "id") if request_id is _MISSING else request_id
        request_id = None if request_id is _MISSING else request_id_of(request_id, "id")
        text, messages = _prompt_text(obj)
        prompt = TextPrompt(text, length=prompt_tokens, messages=messages)
        return ParsedLine(_timestamp_ns(stamp), prompt, output, request_id)


def _usage_count(usage: dict[str, Any], key: str) -> int:
    label = f"usage.{key}"
    return as_length(require(usage, key, label), label)


def _timestamp_ns(value: Any) -> int:
    if not isinstance(value, str):
        return to_ns(value, "timestamp", unit_ns=10**9, max_units=MAX_TIMESTAMP_S)
    try:
        moment = datetime.fromisoformat(value.removesuffix("Z") + ("+00:00" if value.endswith("Z") else ""))
    except ValueError:
        raise LineError(f"timestamp must be unix seconds or ISO-8601, got {show(value)}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    try:
        return (moment - _EPOCH) // timedelta(microseconds=1) * 1000
    except OverflowError:  # an offset that pushes year 1 or 9999 out of datetime's range
        raise LineError(f"timestamp is out of range, got {show(value)}") from None


def _prompt_text(obj: dict[str, Any]) -> tuple[str, tuple[dict[str, str], ...] | None]:
    """The prompt's plain text, and its chat turns when it is a chat (for the model's chat template)."""
    messages = _lookup(obj, "messages")
    if messages is _MISSING:
        prompt = _lookup(obj, "prompt")
        if prompt is _MISSING:
            raise LineError("messages (or prompt) is missing")
        return as_str(prompt, "prompt"), None
    messages = as_list(messages, "messages")
    if not messages:
        raise LineError("messages is empty")
    turns = tuple(_turn(i, m) for i, m in enumerate(messages))
    return "".join(f"<|{t['role']}|>\n{t['content']}\n" for t in turns), turns


def _turn(i: int, message: Any) -> dict[str, str]:
    if not isinstance(message, dict):
        raise LineError(f"messages[{i}] must be an object, got {show(message)}")
    role = as_str(message.get("role"), f"messages[{i}].role")
    content = message.get("content")
    if content is None or isinstance(content, str):
        return {"role": role, "content": content or ""}
    parts = as_list(content, f"messages[{i}].content")
    return {"role": role, "content": "".join(_part_text(i, j, part) for j, part in enumerate(parts))}


def _part_text(i: int, j: int, part: Any) -> str:
    label = f"messages[{i}].content[{j}]"
    if not isinstance(part, dict):
        raise LineError(f"{label} must be an object, got {show(part)}")
    kind = as_str(part.get("type"), f"{label}.type")
    return as_str(part.get("text"), f"{label}.text") if kind == "text" else f"[{kind}]"
