"""A server process's lifecycle (`vllm serve`'s) against a stand-in server process: start, readiness, crash, port
in use, start time-out, stop."""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import httpx2
import pytest

from tuner.executors.server_process import ServerProcess, ServerStartError, free_port, log_tail

STANDIN = [sys.executable, str(Path(__file__).with_name("vllm_standin.py")), "serve"]


def _server(tmp_path: Path, start_timeout_s: float = 20.0, grace_s: float = 5.0, **env: str) -> ServerProcess:
    return ServerProcess(STANDIN, {**os.environ, **env, "STANDIN_MARK": str(tmp_path / "mark")}, start_timeout_s,
                         grace_s, "vllm serve", "executor.vllm.start_timeout_s")


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "trial.yaml"
    path.write_text("model: standin-model\nmax-num-seqs: 3\nno-enable-prefix-caching: true\n")
    return path


def test_start_waits_for_health_and_models_then_stop_ends_the_group(tmp_path):
    server = _server(tmp_path, STANDIN_START_S="0.5")
    took = server.start(_config(tmp_path), tmp_path / "server.log")
    try:
        assert took >= 0.5
        assert httpx2.get(f"{server.url}/models").json()["data"][0]["id"] == "standin-model"
        assert server.crashed() is None
    finally:
        assert server.stop() == "stopped by SIGTERM"
    assert server.stop() == "not running"
    log = (tmp_path / "server.log").read_text()
    assert f"serve --config {tmp_path / 'trial.yaml'} --host 127.0.0.1 --port {server.port}" in log
    assert 'config: {"max-num-seqs": 3, "model": "standin-model", "no-enable-prefix-caching": true}' in log


def test_a_crash_during_start_fails_with_the_servers_own_last_lines(tmp_path):
    server = _server(tmp_path, STANDIN_MODE="crash")
    with pytest.raises(ServerStartError) as e:
        server.start(_config(tmp_path), tmp_path / "server.log")
    message = str(e.value)
    assert message.startswith("vllm serve exited with code 1 before it was ready: $ ")
    assert message.endswith("RuntimeError: CUDA out of memory while capturing graphs (stand-in)")


def test_a_hang_times_out_and_a_server_ignoring_sigterm_is_killed(tmp_path):
    server = _server(tmp_path, start_timeout_s=1.0, grace_s=0.5, STANDIN_MODE="hang")
    began = time.monotonic()
    with pytest.raises(ServerStartError) as e:
        server.start(_config(tmp_path), tmp_path / "server.log")
    assert str(e.value).startswith("vllm serve was not ready after 1 s (executor.vllm.start_timeout_s): $ ")
    assert str(e.value).endswith("compiling forever")
    assert time.monotonic() - began < 10


def test_hang_stop_reports_the_sigkill(tmp_path):
    server = _server(tmp_path, grace_s=0.3, STANDIN_MODE="hang")
    server._spawn(_config(tmp_path), tmp_path / "server.log")
    time.sleep(0.5)  # the stand-in has set SIGTERM aside
    assert server.stop() == "killed (SIGKILL) after 0.3 s"


def test_a_port_taken_before_the_server_binds_is_retried_on_another(tmp_path):
    server = _server(tmp_path, STANDIN_MODE="port-taken-once")
    server.start(_config(tmp_path), tmp_path / "server.log")
    try:
        log = (tmp_path / "server.log").read_text()
        assert log.count("$ ") == 2 and "Address already in use" in log
        assert httpx2.get(f"http://127.0.0.1:{server.port}/health").status_code == 200
    finally:
        server.stop()


def test_free_port_skips_a_port_in_use():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        assert free_port() != busy.getsockname()[1]


def test_log_tail_keeps_the_last_non_empty_lines(tmp_path):
    log = tmp_path / "x.log"
    log.write_text("a\n\nb\nc\n\n")
    assert log_tail(log, 2) == "b | c"
    assert log_tail(tmp_path / "missing.log") == "(no log)"


def test_stop_waits_for_every_process_of_the_group(tmp_path):
    server = _server(tmp_path, STANDIN_CHILD="1")
    server.start(_config(tmp_path), tmp_path / "server.log")
    child = int((tmp_path / "mark.child").read_text())
    assert server.stop() == "stopped by SIGTERM"
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)
