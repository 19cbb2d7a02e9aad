"""The engine in its own process: a load failure there is the command's one-line error (exit 2), the process is
gone once the server stops, and its death is seen (/health 503 with the reason, new requests 503)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
import yaml

from tests.runtime.serve.server_factories import running_server, server_config

CONFIG = server_config("tiny")
TOO_SMALL = server_config("tiny", device_memory_gb=0.0001)  # no KV block fits: the engine cannot be built
NO_ROOM = "cache: KV pool of tier 0 (block_size 16) holds 0 blocks but one request of 4096 tokens needs 256."
BODY = {"model": "tiny", "prompt": [1, 2, 3], "max_tokens": 3000, "stream": True, "ignore_eos": True}


def test_a_load_failure_in_the_engine_process_is_one_line_and_exit_2(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(TOO_SMALL.to_dict(), sort_keys=False))
    done = subprocess.run([sys.executable, "-m", "runtime.serve", "--config", str(path), "--port", "0"],
                          capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[3])
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert line.startswith(f"error: {NO_ROOM}")


def test_the_engine_process_is_gone_once_the_server_stops():
    with running_server(CONFIG) as s:
        process = s.runner.handle.process
        answer = httpx2.post(s.base_url + "/completions", json={**BODY, "max_tokens": 2, "stream": False})
        assert answer.json()["usage"]["completion_tokens"] == 2 and process.is_alive()
    assert (process.is_alive(), process.exitcode) == (False, 0)
    with pytest.raises(ProcessLookupError):  # exited and reaped: no orphan, no zombie
        os.kill(process.pid, 0)


def test_health_is_503_with_the_reason_once_the_engine_process_dies():
    with running_server(CONFIG) as s, httpx2.Client(timeout=30) as http:
        root = s.base_url.removesuffix("/v1")
        assert http.get(root + "/health").status_code == 200
        with http.stream("POST", s.base_url + "/completions", json=BODY) as stream:
            lines = stream.iter_lines()
            assert next(lines).startswith("data: {")  # the engine is stepping it
            s.runner.handle.process.kill()
            with pytest.raises(httpx2.RemoteProtocolError):  # the open stream is failed, its connection closed
                list(lines)
        health = http.get(root + "/health")
        assert (health.status_code, health.text) == (503, "the engine process was killed by SIGKILL")
        refused = http.post(s.base_url + "/completions", json=BODY)
        assert refused.status_code == 503
        assert refused.json()["error"] == {"message": "the engine stopped: the engine process was killed by SIGKILL",
                                           "type": "server_error", "param": None, "code": 503}
