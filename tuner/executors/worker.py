"""The trial worker: a separate process that keeps model weights loaded and runs one trial at a time.

Messages on its pipe (tuples):
    parent -> worker   ("describe", EngineConfig)       answer ("described", Hardware)
                       ("traffic", key, requests)       once per traffic, kept for later trials
                       ("job", TrialJob)                run it; answer ("result", TrialOutcome)
                       ("continue",) / ("stop",)        the answer to a ("checkpoint", Probe)
    worker -> parent   ("progress", probe, scale, done, total)   no answer
                       ("checkpoint", Probe)            the first capacity probe: keep going?
"""

from __future__ import annotations

import resource
from multiprocessing.connection import Connection

import torch

from runtime import EngineConfig, describe_device
from tuner.executors.run import WorkerState, run_trial
from tuner.measure.job import Hardware, Probe


class _Pipe:
    """The trial's channel to the study, over the worker's pipe."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def progress(self, probe: int, scale: float, done: int, total: int) -> None:
        self.conn.send(("progress", probe, scale, done, total))

    def checkpoint(self, probe: Probe) -> bool:
        self.conn.send(("checkpoint", probe))
        return self.conn.recv() == ("continue",)


def hardware(config: EngineConfig) -> Hardware:
    info = describe_device(config)
    versions = f"torch {info.torch_version}" + (f", triton {info.triton_version}" if info.triton_version else "")
    versions += f", CUDA {info.driver}" if info.driver else ""
    gpus = torch.cuda.device_count() if info.type == "cuda" else 0
    return Hardware(info.type, info.name, info.memory_gb, info.hardware, versions, gpus=gpus)


def worker_main(conn: Connection, cpu_threads: int | None, memory_limit_gb: float | None) -> None:
    """Serve trials until the pipe closes. A memory limit (CPU runs) turns a runaway trial into an OOM."""
    if cpu_threads:
        torch.set_num_threads(cpu_threads)
    if memory_limit_gb:
        limit = int(memory_limit_gb * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    state = WorkerState()
    traffic: dict[str, object] = {}
    pipe = _Pipe(conn)
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message[0] == "describe":
            conn.send(("described", hardware(message[1])))
        elif message[0] == "traffic":
            traffic[message[1]] = message[2]
        elif message[0] == "job":
            job = message[1]
            conn.send(("result", run_trial(job, traffic[job.traffic_key], state, pipe)))
