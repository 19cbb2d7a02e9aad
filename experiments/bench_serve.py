"""Streaming server throughput against offline `LLM.generate`: same engine config, same run, one GPU.

The ANCHORS mixed workload (`bench_e2e.workload`: Llama-3-8B shape, random bf16 weights, greedy, EOS
ignored, 256 requests, prompts uniform in [64, 2048) tokens, outputs in [32, 512)):
    offline  `LLM.generate` on all 256 at once, timed after a warm-up (bench_e2e.run_pagetune)
    server   `python -m runtime.serve --config <the same knobs> --engine-mode M` in a subprocess, once per
             mode of --modes (default process,thread: the engine in its own process, or on a thread of the
             server's); after the same warm-up, the 256 requests sent at once as streamed
             `/v1/completions` (token-id prompts, max_tokens, ignore_eos, include_usage) by the tuner's
             HTTP replay, which records every chunk, split over --client-processes processes started
             together (one Python client could lag the server)
Output tok/s = output tokens / wall seconds (offline: the generate call; server: first send to last
token). The table has a row per engine mode: the ratio to the one offline run (target >= 0.9x), the
server's TTFT and TPOT under that burst, and the tokens per SSE chunk (1.00 unless the server's event
loop fell behind its engine and merged them). --record appends it to experiments/RESULTS.md.

    python3 experiments/bench_serve.py --model llama-3-8b [--modes process,thread] [--record]
    python3 experiments/bench_serve.py --model tiny --requests 8 --device cpu     # a CPU smoke run

Needs the server's wheels (fastapi, uvicorn and theirs) and the tuner's (hydra-core, omegaconf, httpx2).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import httpx2
import torch
import yaml

from experiments.bench_e2e import run_pagetune, warm_up_prompts, workload
from experiments.record import add_record_args, header, record
from runtime import EngineConfig
from runtime.model.presets import preset_config
from runtime.serve.cli import ENGINE_MODES
from tuner.config import SloConfig
from tuner.measure.http_replay import http_replay
from tuner.measure.metrics import summarize
from tuner.measure.timeline import ReplayResult
from tuner.traffic import TrafficRequest

ROOT = Path(__file__).resolve().parents[1]


def knobs(args: argparse.Namespace) -> dict[str, Any]:
    """bench_e2e's engine knobs; CUDA graphs wherever they can run (the runtime's default)."""
    extra = {"device": "cpu", "device_memory_gb": args.device_memory_gb} if args.device == "cpu" else {}
    return dict(max_num_seqs=256, max_num_batched_tokens=args.max_num_batched_tokens, max_model_len=4096,
                gpu_memory_utilization=0.9, **extra)


@contextlib.contextmanager
def server(config: EngineConfig, mode: str, port: int, timeout_s: float) -> Iterator[str]:
    """`python -m runtime.serve` on `config`, its engine in `mode`, in a subprocess; its API root once /health
    answers."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.yaml"
        path.write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
        command = [sys.executable, "-m", "runtime.serve", "--config", str(path), "--port", str(port),
                   "--max-pending", "100000", "--log-level", "warning", "--engine-mode", mode]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        proc = subprocess.Popen(command, cwd=ROOT, env=env)
        try:
            _wait_healthy(f"http://127.0.0.1:{port}", proc, timeout_s)
            yield f"http://127.0.0.1:{port}/v1"
        finally:
            proc.terminate()
            proc.wait(timeout=60)


def _wait_healthy(root: str, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with code {proc.returncode} (its error is above)")
        with contextlib.suppress(httpx2.HTTPError):
            if httpx2.get(f"{root}/health", timeout=2).status_code == 200:
                return
        time.sleep(0.5)
    raise RuntimeError(f"the server did not answer /health within {timeout_s:g} s")


def burst(prompts: list[list[int]], outs: list[int]) -> tuple[TrafficRequest, ...]:
    return tuple(TrafficRequest(f"b{i}", 0.0, tuple(p), o, f"bench:{i}") for i, (p, o) in enumerate(zip(prompts, outs)))


def _client(base: str, model: str, requests: tuple[TrafficRequest, ...], start: float) -> tuple[float, ReplayResult]:
    """One client process: its share of the burst, sent at `start` (perf_counter: one clock for all processes)."""
    time.sleep(max(0.0, start - time.perf_counter()))
    return time.perf_counter(), http_replay(base, model, requests)


def send_burst(base: str, model: str, requests: tuple[TrafficRequest, ...], processes: int) -> ReplayResult:
    """Every request at once, split over client processes: the client parses one SSE chunk per token per
    request, and one Python process could fall behind the server it measures."""
    shares = [requests[i::processes] for i in range(processes)]
    with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(time.sleep, [1.0] * processes))  # every worker started (this script imported) first
        start = time.perf_counter() + 0.5
        parts = list(pool.map(_client, [base] * processes, [model] * processes, shares, [start] * processes))
    first = min(t for t, _ in parts)
    records = tuple(r for _, part in parts for r in part.records)
    last = max(t + part.duration_s for t, part in parts)
    return ReplayResult(records, len(requests), last - first, last - first, False, math.nan, math.nan, math.nan)


def run_server(model: str, config: EngineConfig, mode: str, prompts, outs, port: int, timeout_s: float,
               processes: int) -> dict[str, float]:
    with server(config, mode, port, timeout_s) as base:
        http_replay(base, model, burst(warm_up_prompts(prompts), [8] * 8))
        result = send_burst(base, model, burst(prompts, outs), processes)
    rejected = [r.rejected_reason for r in result.records if r.rejected_reason]
    if rejected:
        raise RuntimeError(f"{len(rejected)} requests rejected by the server, e.g. {rejected[0]}")
    metrics = summarize(result, SloConfig(), math.nan)
    tokens = sum(r.output_tokens for r in result.records)
    # > 1 where the server's event loop fell behind its engine and merged a stream's tokens into one chunk
    per_chunk = tokens / max(1, sum(len(r.token_times) for r in result.records))
    return {"tok_s": metrics["output_tok_s"], "tokens": tokens, "seconds": result.duration_s,
            "tokens_per_chunk": per_chunk, **{k: metrics[k] for k in ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s")}}


def render(rows: list[dict[str, Any]]) -> str:
    lines = ["| workload | requests | engine mode | offline LLM.generate tok/s | server, streamed tok/s | "
             "server / offline | server TTFT p50 / p99 s | server TPOT p50 s | tokens per SSE chunk |",
             "|---" * 9 + "|"]
    for r in rows:
        lines.append(f"| {r['workload']} | {r['requests']} | {r['mode']} | {r['offline_tok_s']:,.0f} | "
                     f"{r['server_tok_s']:,.0f} | "
                     f"{r['ratio']:.2f}x (target >= 0.9x) | {r['ttft_p50_s']:.3g} / {r['ttft_p99_s']:.3g} | "
                     f"{r['tpot_p50_s']:.3g} | {r['tokens_per_chunk']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="llama-3-8b")
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--max-num-batched-tokens", type=int, default=8192)
    parser.add_argument("--device", default="auto", help="cpu for a smoke run (with --device-memory-gb)")
    parser.add_argument("--device-memory-gb", type=float, default=1.0)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--client-processes", type=int, default=4, help="processes sending the burst")
    parser.add_argument("--modes", default=",".join(ENGINE_MODES),
                        help=f"engine modes to serve with, comma-separated, a run and a row each (of {ENGINE_MODES})")
    parser.add_argument("--start-timeout-s", type=float, default=900.0, help="model load and graph capture")
    add_record_args(parser)
    args = parser.parse_args()
    modes = args.modes.split(",")
    if not modes or set(modes) - set(ENGINE_MODES):
        parser.error(f"--modes: a comma-separated list of {ENGINE_MODES}, got {args.modes!r}")
    if args.device == "cpu":  # one thread each: on a small shared CPU, two fight over the cores (8x slower)
        torch.set_num_threads(1)
        os.environ["OMP_NUM_THREADS"] = "1"  # the server's process
    prompts, outs = workload("mixed", args.requests, preset_config(args.model).vocab_size)
    offline = run_pagetune(args.model, prompts, outs, **knobs(args))
    print(f"offline: {offline['tokens']} tokens in {offline['seconds']:.2f} s", flush=True)
    config = EngineConfig.from_flat(args.model, **knobs(args))
    rows = []
    for mode in modes:
        served = run_server(args.model, config, mode, prompts, outs, args.port, args.start_timeout_s,
                            args.client_processes)
        print(f"server, engine in a {mode}: {served['tokens']} tokens in {served['seconds']:.2f} s", flush=True)
        if served["tokens"] != offline["tokens"]:
            raise RuntimeError(f"the server generated {served['tokens']} tokens, offline {offline['tokens']}")
        rows.append({"workload": "mixed", "requests": args.requests, "mode": mode, "offline_tok_s": offline["tok_s"],
                     "server_tok_s": served["tok_s"], "ratio": served["tok_s"] / offline["tok_s"],
                     **{k: served[k] for k in ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tokens_per_chunk")}})
    table = render(rows)
    print(table)
    if args.record:
        record(header(f"Streaming server vs offline generate ({args.model} shape, random bf16 weights)") + "\n"
               + table + "\n", args.results)


if __name__ == "__main__":
    main()
