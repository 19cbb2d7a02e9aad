"""The README's first calls on a CPU, exactly as written, with the runtime's defaults: `LLM(model="smollm2-135m")`
and `python -m runtime.serve --model smollm2-135m` (a real subprocess on 127.0.0.1, bounded in time)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from runtime import LLM, SamplingParams

pytestmark = pytest.mark.slow
ROOT = Path(__file__).parents[2]
PROMPT, GREEDY = "The capital of France is", SamplingParams(max_tokens=8, temperature=0.0)
ANSWER = " Paris.\n\nThe answer is:"


def test_the_offline_api_answers_with_its_defaults(smollm2_gguf):
    llm = LLM(model="smollm2-135m")
    [out] = llm.generate([PROMPT], GREEDY, use_tqdm=False)
    assert out.outputs[0].text == ANSWER
    assert llm.engine.max_model_len == 8192  # the model's own length: the pool was planned to hold it


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _complete(server: subprocess.Popen, base: str, deadline: float) -> dict:
    body = json.dumps({"model": "smollm2-135m", "prompt": PROMPT, "max_tokens": 8, "temperature": 0.0}).encode()
    while True:
        try:
            request = urllib.request.Request(f"{base}/completions", body, {"content-type": "application/json"})
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.load(response)
        except OSError:  # not listening yet
            assert server.poll() is None, f"the server stopped: {server.communicate()[0]}"
            assert time.monotonic() < deadline, "the server did not answer in time"
            time.sleep(0.5)


def test_the_server_answers_with_its_defaults(smollm2_gguf):
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "runtime.serve", "--model", "smollm2-135m", "--port", str(port)],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        answer = _complete(server, f"http://127.0.0.1:{port}/v1", time.monotonic() + 300)
        assert server.poll() is None
        assert answer["choices"][0]["text"] == ANSWER
    finally:
        server.terminate()
        output, _ = server.communicate(timeout=60)
    assert f"serving smollm2-135m (max_model_len 8192, engine in a process) on http://127.0.0.1:{port}/v1" in output
