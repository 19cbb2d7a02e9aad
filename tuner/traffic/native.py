"""pagetune's own JSONL: one request per line, the format `tuner.traffic.synth` writes.

    {"timestamp": 12.5, "prompt_tokens": 900, "output_tokens": 64, "prefix_id": "sys-a", "prefix_tokens": 512}

- `timestamp`: seconds (any origin, e.g. unix time), a number in [0, 1e12]. Required.
- `output_tokens`: the logged output length, >= 1. Required.
- The prompt, exactly one of: `prompt_tokens` (a length; tokens are synthesized), `prompt` (text;
  the caller's tokenizer or the byte-level synthesis), `prompt_token_ids` (the ids, checked
  against the vocabulary).
- Shared prefixes, with `prompt_tokens` only, at most one of:
  `prefix_id` + `prefix_tokens`: the first `prefix_tokens` tokens are the group's (requests with the
  same `prefix_id` share them; with different `prefix_tokens` they share the shorter);
  `hash_ids`: ids of consecutive prefix blocks of `hash_block_size` tokens (default 16, the
  runtime's default KV block size, so every shared block is a prefix-cache hit).
- `priority` (int, default 0) and `request_id` (string, unique in the file) are optional.

Any other field is an error that names it (a typo such as `output_token` must not silently drop a
length), with the nearest known field as a hint.
"""

from __future__ import annotations

from tuner.traffic.fields import (
    MAX_TIMESTAMP_S,
    LineError,
    LineParser,
    ParsedLine,
    as_int,
    as_length,
    as_list,
    as_str,
    check_keys,
    hash_block_segments,
    parse_object,
    request_id_of,
    require,
    show,
    to_ns,
)
from tuner.traffic.requests import MAX_TOKENS
from tuner.traffic.tokens import Prompt, Segment, SyntheticPrompt, TextPrompt, TokenPrompt

NAME = "native"
DEFAULT_HASH_BLOCK_SIZE = 16
_PROMPT_KEYS = ("prompt_tokens", "prompt", "prompt_token_ids")
_SHARED_KEYS = ("prefix_id", "prefix_tokens", "hash_ids")
FIELDS = ("timestamp", "output_tokens", *_PROMPT_KEYS, *_SHARED_KEYS, "priority", "request_id")


def sniff(text: str) -> bool:
    try:
        obj = parse_object(text)
    except LineError:
        return False
    return any(key in obj for key in ("output_tokens", "prompt_tokens", "prompt_token_ids"))


class Parser(LineParser):
    DEFAULT_HASH_BLOCK_SIZE = DEFAULT_HASH_BLOCK_SIZE

    def parse(self, text: str) -> ParsedLine:
        obj = parse_object(text)
        check_keys(obj, FIELDS)
        timestamp = to_ns(require(obj, "timestamp"), "timestamp", unit_ns=10**9, max_units=MAX_TIMESTAMP_S)
        output = as_length(require(obj, "output_tokens"), "output_tokens")
        request_id = request_id_of(obj["request_id"], "request_id") if "request_id" in obj else None
        priority = as_int(obj.get("priority", 0), "priority", low=-(2**31), high=2**31 - 1)
        return ParsedLine(timestamp, self._prompt(obj), output, request_id, priority)

    def _prompt(self, obj: dict) -> Prompt:
        given = [key for key in _PROMPT_KEYS if key in obj]
        if len(given) != 1:
            got = ", ".join(given) if given else "none"
            raise LineError(f"give exactly one of prompt_tokens, prompt, prompt_token_ids (got {got})")
        shared = [key for key in _SHARED_KEYS if key in obj]
        if shared and given[0] != "prompt_tokens":
            raise LineError(f"{shared[0]} goes with prompt_tokens, not with {given[0]}")
        if given[0] == "prompt":
            return TextPrompt(as_str(obj["prompt"], "prompt"))
        if given[0] == "prompt_token_ids":
            return TokenPrompt(_token_ids(obj["prompt_token_ids"]))
        length = as_length(obj["prompt_tokens"], "prompt_tokens")
        return SyntheticPrompt(length, self._shared(obj, length))

    def _shared(self, obj: dict, length: int) -> tuple[Segment, ...]:
        if "hash_ids" in obj:
            if "prefix_id" in obj or "prefix_tokens" in obj:
                raise LineError("give hash_ids or prefix_id/prefix_tokens, not both")
            return hash_block_segments(obj["hash_ids"], "hash_ids", prompt_tokens=length,
                                       block_size=self.block_size)
        if "prefix_id" not in obj and "prefix_tokens" not in obj:
            return ()
        prefix_id = as_str(require(obj, "prefix_id", "prefix_id (prefix_tokens needs it)"), "prefix_id")
        if not prefix_id:
            raise LineError("prefix_id must not be empty")
        shared = require(obj, "prefix_tokens", "prefix_tokens (the length of the shared prefix)")
        shared = as_int(shared, "prefix_tokens", low=1, high=length)
        return (Segment(f"prefix:{prefix_id}", shared),)


def _token_ids(value: object) -> tuple[int, ...]:
    ids = as_list(value, "prompt_token_ids")
    if not 1 <= len(ids) <= MAX_TOKENS:
        raise LineError(f"prompt_token_ids must hold 1 to {MAX_TOKENS} ids, got {len(ids)}")
    for i, t in enumerate(ids):
        if type(t) is not int or t < 0:  # type() also refuses bools
            raise LineError(f"prompt_token_ids[{i}] must be a token id (an integer >= 0), got {show(t)}")
    return tuple(ids)
