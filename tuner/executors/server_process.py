"""One OpenAI-compatible server child process (`vllm serve`, `python -m runtime.serve`): started on a free port,
waited for, stopped.

    start    pick a free port; `COMMAND --config FILE --host 127.0.0.1 --port P` in its own process
             group, stdout and stderr to a log file; a server that loses the port to another process
             before it binds ("address already in use" in its log) is started once more on another
    ready    GET /health answers 200, then GET /v1/models lists a model; polled every POLL_S
    fail     the process exits first (a crash, a refused option), or start_timeout_s passes (a hang):
             ServerStartError with the last lines of the server's own log
    stop     SIGTERM to the group, SIGKILL after grace_s; done when every process of the group is gone (vLLM's
             engine processes hold the GPU memory the next start needs); the log stays for the record

Torch-free and vLLM-free: anything that takes these flags and serves the OpenAI API can stand in (tests
use a small script). Its messages name it (`name`) and the setting that bounds its start (`timeout_key`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx2

__all__ = ["ServerProcess", "ServerStartError", "free_port", "log_tail"]

POLL_S = 0.2
TAIL_LINES = 12
_PORT_TAKEN = "address already in use"


class ServerStartError(RuntimeError):
    """The server exited, or was not ready in time, before serving; the message ends with its own log lines."""


def free_port() -> int:
    """A port nothing listens on now (the OS's pick for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log_tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last `lines` non-empty lines of a log, joined by ' | ' (one line for a trial's reason)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    kept = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
    return " | ".join(kept) or "(empty log)"


@dataclass
class ServerProcess:
    command: Sequence[str]  # argv before `--config` (["vllm", "serve"], [python, "-m", "runtime.serve"])
    env: Mapping[str, str]  # the child's whole environment
    start_timeout_s: float
    grace_s: float  # SIGTERM, then SIGKILL after this long
    name: str  # what its messages call it ("vllm serve", "replica 2 of 2 (python -m runtime.serve)")
    timeout_key: str  # the setting start_timeout_s comes from, for the time-out's message
    _proc: subprocess.Popen | None = None
    port: int | None = None
    log_path: Path | None = None

    @property
    def url(self) -> str:
        """The OpenAI-compatible base URL (`http://127.0.0.1:PORT/v1`)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, config_file: Path, log_path: Path) -> float:
        """Start the server on `config_file` and wait until it serves; the seconds it took. Raises ServerStartError."""
        began = time.monotonic()
        for attempt in (1, 2):
            self._spawn(config_file, log_path)
            try:
                self._wait_ready(began)
                return time.monotonic() - began
            except ServerStartError as e:
                self.stop()
                if attempt == 2 or _PORT_TAKEN not in str(e).lower():
                    raise
        raise AssertionError("unreachable")

    def _spawn(self, config_file: Path, log_path: Path) -> None:
        self.port, self.log_path = free_port(), log_path
        argv = [*self.command, "--config", str(config_file), "--host", "127.0.0.1", "--port", str(self.port)]
        with open(log_path, "ab") as log:
            log.write(f"$ {' '.join(argv)}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          env=dict(self.env), start_new_session=True)

    def _wait_ready(self, began: float) -> None:
        proc, log_path = self._proc, self.log_path  # a stop() from another thread (a signal) clears self._proc
        assert proc is not None and log_path is not None
        health = f"http://127.0.0.1:{self.port}/health"
        while True:
            code = proc.poll()
            if code is not None:
                raise ServerStartError(f"{self.name} exited with code {code} before it was ready: "
                                       f"{log_tail(log_path)}")
            if time.monotonic() - began > self.start_timeout_s:
                raise ServerStartError(f"{self.name} was not ready after {self.start_timeout_s:g} s "
                                       f"({self.timeout_key}): {log_tail(log_path)}")
            if _answers(health) and _lists_models(self.url):
                return
            time.sleep(POLL_S)

    def crashed(self) -> str | None:
        """Why the server is gone (its exit and last log lines), or None while it runs."""
        if self._proc is None or self._proc.poll() is None:
            return None
        return f"{self.name} exited with code {self._proc.returncode}: {log_tail(self.log_path)}"  # type: ignore[arg-type]

    def stop(self) -> str:
        """Stop the process group: SIGTERM, then SIGKILL after grace_s. How it ended, for the log."""
        proc, self._proc = self._proc, None
        if proc is None:
            return "not running"
        if proc.poll() is not None:
            _signal_group(proc.pid, signal.SIGKILL)  # what it left behind (engine processes) goes too
            return f"had exited with code {proc.returncode}"
        _signal_group(proc.pid, signal.SIGTERM)
        if _group_gone(proc, time.monotonic() + self.grace_s):
            return "stopped by SIGTERM"
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
        _group_gone(proc, time.monotonic() + self.grace_s)
        return f"killed (SIGKILL) after {self.grace_s:g} s"


def _group_gone(proc: subprocess.Popen, deadline: float) -> bool:
    """Wait until the server and every process of its group (vLLM's engine processes, which hold the GPU's
    memory the next start needs) have exited, or `deadline` passes."""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return True
        time.sleep(0.05)
    return False


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)  # start_new_session: the group's id is the child's pid


def _answers(url: str) -> bool:
    try:
        return httpx2.get(url, timeout=2.0).status_code == 200
    except httpx2.HTTPError:
        return False


def _lists_models(base: str) -> bool:
    try:
        response = httpx2.get(f"{base}/models", timeout=2.0)
        return response.status_code == 200 and bool(response.json().get("data"))
    except (httpx2.HTTPError, ValueError):
        return False
