"""Mooncake JSONL (kvcache-ai/Mooncake traces, and traces of the same shape):

    {"timestamp": 40, "input_length": 23769, "output_length": 3, "hash_ids": [151, 152, ...]}

- `timestamp`: milliseconds from the trace start, a number in [0, 1e15].
- `input_length` / `output_length`: prompt and output tokens, each >= 1.
- `hash_ids` (optional): ids of consecutive prefix blocks of `hash_block_size` tokens (default 512,
  Mooncake's); requests with the same leading ids share those blocks' tokens. The last block may
  be partial. More ids than `input_length` fills is an error that suggests a different block size
  (Qwen-Bailian traces, for one, use 16-token blocks).

Other fields (`chat_id`, `turn`, `type`, ... in related traces) are ignored: the shape is shared by
several producers, and none of their extra fields changes what is replayed.
"""

from __future__ import annotations

from decimal import Decimal

from tuner.traffic.fields import (
    LineError,
    LineParser,
    ParsedLine,
    as_length,
    hash_block_segments,
    parse_object,
    require,
    to_ns,
)
from tuner.traffic.tokens import SyntheticPrompt

NAME = "mooncake"
DEFAULT_HASH_BLOCK_SIZE = 512
MAX_TIMESTAMP_MS = Decimal(10) ** 15


def sniff(text: str) -> bool:
    try:
        obj = parse_object(text)
    except LineError:
        return False
    return "input_length" in obj or "output_length" in obj


class Parser(LineParser):
    DEFAULT_HASH_BLOCK_SIZE = DEFAULT_HASH_BLOCK_SIZE

    def parse(self, text: str) -> ParsedLine:
        obj = parse_object(text)
        timestamp = to_ns(require(obj, "timestamp"), "timestamp", unit_ns=10**6, max_units=MAX_TIMESTAMP_MS)
        prompt = as_length(require(obj, "input_length"), "input_length")
        output = as_length(require(obj, "output_length"), "output_length")
        shared = ()
        if "hash_ids" in obj:
            shared = hash_block_segments(obj["hash_ids"], "hash_ids", prompt_tokens=prompt,
                                         block_size=self.block_size)
        return ParsedLine(timestamp, SyntheticPrompt(prompt, shared), output, None)
