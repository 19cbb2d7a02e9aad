"""The model's own tokenizer for traffic text, run in a child process (`python -m runtime.model.tokenize`)
so that the tuner's process never imports transformers or torch. Started on the first text it is asked
to encode: traffic without text never starts it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from tuner.traffic import TrafficError

Message = dict[str, Any]


class ModelTokenizer:
    """`encode(text)` and `chat(messages)` through the model's tokenizer; `close()` ends the child."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.used = False  # whether any text went through it (the console says so)
        self._proc: subprocess.Popen[str] | None = None

    def encode(self, text: str) -> list[int]:
        return self._ask({"text": text})

    def chat(self, messages: Sequence[Message]) -> list[int]:
        return self._ask({"messages": list(messages)})

    def _ask(self, request: dict[str, Any]) -> list[int]:
        proc = self._process()
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(request) + "\n")
        proc.stdin.flush()
        reply = json.loads(proc.stdout.readline() or '{"error": "the tokenizer process ended"}')
        if "error" in reply:
            raise ValueError(reply["error"])  # the loader reports it against the line
        return reply["ids"]

    def _process(self) -> subprocess.Popen[str]:
        if self._proc is None:
            self.used = True
            self._proc = subprocess.Popen([sys.executable, "-m", "runtime.model.tokenize", self.model],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
            assert self._proc.stdout is not None
            ready = json.loads(self._proc.stdout.readline() or '{"error": "it exited before answering"}')
            if "ready" not in ready:
                self.close()
                raise TrafficError(f"the tokenizer of model {self.model!r} could not start: {ready['error']}")
        return self._proc

    def close(self) -> None:
        if self._proc is not None:
            self._proc.stdin.close()  # type: ignore[union-attr]
            self._proc.wait(timeout=30)
            self._proc = None

    def __enter__(self) -> ModelTokenizer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
