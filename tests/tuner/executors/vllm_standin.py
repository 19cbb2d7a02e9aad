"""A stand-in for `vllm serve` in tests: the same command line, /health, /v1/models and streamed completions.

    python vllm_standin.py serve --config FILE --host H --port P    serve (FILE's `max-num-seqs` requests at once)
    python vllm_standin.py --probe                                  what tuner/executors/vllm_probe.py prints, for
                                                                    vLLM 0.26.0's recorded argument list

Its capacity is known: `max-num-seqs` requests run at once (default 2), each token takes STANDIN_TOKEN_S
(default 0.002 s). STANDIN_MODE picks a failure: crash (exits during start with a message), hang (never
ready, and ignores SIGTERM), port-taken-once (the first start reports the port in use, marked in
STANDIN_MARK); STANDIN_REFUSE=KEY=VALUE refuses to start on a config holding it. STANDIN_START_S delays
readiness; STANDIN_CHILD starts a child process (as vLLM's engine process), its pid in STANDIN_MARK.child.
Standard library and PyYAML only.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]


def probe() -> None:
    data = json.loads((ROOT / "tuner" / "data" / "vllm-0.26.0-args.json").read_text())
    json.dump({"version": data["version"], "device": {"type": "cuda", "name": "NVIDIA H200", "memory_gb": 139.8},
               "args": data["args"]}, sys.stdout)


def handler(model: str, slots: threading.Semaphore, token_s: float) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        disable_nagle_algorithm = True  # each SSE chunk leaves at once, not after the client's delayed ACK
        def log_message(self, *args) -> None:  # quiet: the log keeps what the tests read
            pass

        def _json(self, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif self.path == "/v1/models":
                self._json({"object": "list", "data": [{"id": model, "object": "model"}]})
            else:
                self.send_error(404)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            with slots:
                try:
                    for _ in range(body["max_tokens"]):
                        time.sleep(token_s)
                        self._event({"choices": [{"index": 0, "text": "x"}]})
                    usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": body["max_tokens"]}
                    self._event({"choices": [], "usage": usage})
                    self.wfile.write(b"data: [DONE]\n\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass

        def _event(self, chunk: dict) -> None:
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()

    return Handler


class Server(ThreadingHTTPServer):
    request_queue_size = 256  # a burst of connections at once: 5 (the default) drops SYNs, retried a second later
    daemon_threads = True


def serve(argv: list[str]) -> None:
    config_file = argv[argv.index("--config") + 1]
    port = int(argv[argv.index("--port") + 1])
    args = yaml.safe_load(Path(config_file).read_text()) or {}
    print(f"config: {json.dumps(args, sort_keys=True)}", flush=True)
    mode = os.environ.get("STANDIN_MODE", "")
    mark = Path(os.environ.get("STANDIN_MARK", "/nonexistent"))
    refused = os.environ.get("STANDIN_REFUSE", "")  # KEY=VALUE: a config the stand-in will not start with
    if refused and f"{refused.split('=')[0]}={args.get(refused.split('=')[0])}" == refused:
        print(f"ValueError: the stand-in refuses {refused}", flush=True)
        sys.exit(1)
    if mode == "crash":
        print("RuntimeError: CUDA out of memory while capturing graphs (stand-in)", flush=True)
        sys.exit(1)
    if mode == "port-taken-once" and not mark.exists():
        mark.write_text("taken")
        print(f"OSError: [Errno 98] Address already in use: ('127.0.0.1', {port})", flush=True)
        sys.exit(1)
    if mode == "hang":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("compiling forever", flush=True)
        while True:
            time.sleep(1)
    if os.environ.get("STANDIN_CHILD"):  # an engine process of its own, in the server's process group
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        Path(f"{mark}.child").write_text(str(child.pid))
    time.sleep(float(os.environ.get("STANDIN_START_S", "0")))
    slots = threading.Semaphore(int(args.get("max-num-seqs", 2)))
    server = Server(("127.0.0.1", port), handler(str(args["model"]), slots,
                                                 float(os.environ.get("STANDIN_TOKEN_S", "0.002"))))
    print(f"serving on {port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    if sys.argv[1:] == ["--probe"]:
        probe()
    else:
        serve(sys.argv[1:])
