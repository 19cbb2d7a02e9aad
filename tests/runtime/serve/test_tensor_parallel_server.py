"""A tensor-parallel config served: `python -m runtime.serve --config best.yaml` starts the ranks, answers as one
device does, and leaves no process behind; a rank that dies is the engine's error (/health 503 naming it)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest
import yaml

from runtime import LLM
from tests.factories import greedy, process_alive
from tests.runtime.serve.server_factories import running_server, server_config

TP2 = server_config("tiny", tensor_parallel_size=2, debug_integrity=False)
BODY = {"model": "tiny", "prompt": [1, 5, 9, 200, 7], "max_tokens": 8, "temperature": 0, "ignore_eos": True}


def _children(pid: int) -> list[int]:
    """Every process below `pid` (Linux /proc)."""
    try:
        direct = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:
        return []
    return direct + [g for c in direct for g in _children(c)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tp1_tokens() -> str:
    out = LLM("tiny", device="cpu").generate(prompt_token_ids=[BODY["prompt"]], sampling_params=greedy(8),
                                             use_tqdm=False)
    return " ".join(map(str, out[0].outputs[0].token_ids))


@pytest.mark.slow
def test_the_serve_command_starts_the_ranks_and_stops_them(tmp_path):
    path = tmp_path / "best.yaml"
    path.write_text(yaml.safe_dump({"runtime": TP2.to_dict()}, sort_keys=False))
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "runtime.serve", "--config", str(path), "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=Path(__file__).parents[3])
    try:
        assert server.stdout.readline().startswith("serving tiny")
        deadline = time.monotonic() + 60
        while True:
            try:
                answer = httpx2.post(f"http://127.0.0.1:{port}/v1/completions", json=BODY, timeout=30)
                break
            except httpx2.ConnectError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert answer.json()["choices"][0]["text"] == _tp1_tokens()
        ranks = _children(server.pid)
        assert len(ranks) >= 2  # the engine process (rank 0) and rank 1
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=60)
    deadline = time.monotonic() + 15
    while any(process_alive(p) for p in ranks) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in ranks if process_alive(p)]


def test_a_dead_rank_is_the_engines_error():
    with running_server(TP2) as s, httpx2.Client(timeout=30) as http:
        root = s.base_url.removesuffix("/v1")
        assert http.post(s.base_url + "/completions", json=BODY).status_code == 200
        [rank1] = [p for p in _children(s.runner.handle.process.pid)
                   if "spawn_main" in Path(f"/proc/{p}/cmdline").read_text()]
        os.kill(rank1, signal.SIGKILL)
        failed = http.post(s.base_url + "/completions", json=BODY)
        health = http.get(root + "/health")
        reason = f"RankFailedError('tensor-parallel rank 1 (pid {rank1}) was killed by SIGKILL; the engine stopped')"
        assert (failed.status_code, health.status_code, health.text) == (503, 503, reason)
