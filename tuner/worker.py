"""The trial worker: a separate process that keeps model weights loaded and runs one trial at a time.

Messages on its pipe (tuples):
    parent -> worker   ("traffic", key, requests)   once per traffic, kept for later trials
                       ("job", TrialJob)            run it; answer ("result", TrialOutcome)
                       ("continue",) / ("stop",)    the answer to a ("progress", done, goodput) report
"""

from __future__ import annotations

import resource
from multiprocessing.connection import Connection

import torch

from tuner.trial import ModelCache, run_trial


def _report(conn: Connection, done: int, goodput: float) -> bool:
    conn.send(("progress", done, goodput))
    return conn.recv() == ("continue",)


def worker_main(conn: Connection, cpu_threads: int | None, memory_limit_gb: float | None) -> None:
    """Serve trials until the pipe closes. A memory limit (CPU runs) turns a runaway trial into an OOM."""
    if cpu_threads:
        torch.set_num_threads(cpu_threads)
    if memory_limit_gb:
        limit = int(memory_limit_gb * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    models = ModelCache()
    traffic: dict[str, object] = {}
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message[0] == "traffic":
            traffic[message[1]] = message[2]
        elif message[0] == "job":
            job = message[1]
            outcome = run_trial(job, traffic[job.traffic_key], models, lambda d, g: _report(conn, d, g))
            conn.send(("result", outcome))
