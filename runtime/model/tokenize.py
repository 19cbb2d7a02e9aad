"""`python -m runtime.model.tokenize MODEL`: the model's tokenizer as a JSON-lines filter, for tools that
must not import transformers themselves (the tuner's parent process tokenizes traffic text with it).

One request per input line, one answer per output line, in order:
    {"text": "..."}                                   -> {"ids": [...]}   (encode_prompt: special tokens added)
    {"messages": [{"role": ..., "content": ...}]}     -> {"ids": [...]}   (encode_chat: the chat template)
    anything that fails                               -> {"error": "one line"}
The first output line is {"ready": MODEL} once the tokenizer is loaded, or {"error": ...} and exit 1.
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from runtime.model.tokenizer import Tokenizer, encode_chat, encode_prompt, load_tokenizer, require_tokenizer


def answer(tokenizer: Tokenizer, request: dict[str, Any]) -> dict[str, Any]:
    try:
        if "messages" in request:
            return {"ids": encode_chat(tokenizer, request["messages"])}
        return {"ids": encode_prompt(tokenizer, request["text"])}
    except Exception as e:  # one bad text is that line's error, never the end of the filter
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}


def serve(model: str, lines: TextIO, out: TextIO) -> int:
    try:
        tokenizer = require_tokenizer(load_tokenizer(model), model)
    except Exception as e:
        out.write(json.dumps({"error": f"{type(e).__name__}: {e}"}) + "\n")
        return 1
    out.write(json.dumps({"ready": model}) + "\n")
    out.flush()
    for line in lines:
        out.write(json.dumps(answer(tokenizer, json.loads(line))) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m runtime.model.tokenize MODEL   (JSON lines on stdin, see the module doc)")
    sys.exit(serve(sys.argv[1], sys.stdin, sys.stdout))
