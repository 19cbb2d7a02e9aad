"""A tensor-parallel rank other than 0: its shard of the model and its KV pool, stepped by rank 0.

    rank 0 (the engine)                           rank r (this process, spawned)
    RankProcesses: spawn  ------------------->    Hello (imports done)            then the group joined
                   RunnerPlan (tiers, dtypes) ->  the model loaded and cut, the KV pool allocated
                   <---------------------------   Ready
    each step:     StepMessage --------------->   ModelRunner.execute: the same forward, its collectives
    close:         None (or the pipe's end) --->  exit

A rank that raises sends `Failed` (its traceback) before it exits. It also exits when rank 0's end of the
pipe closes or rank 0's process is gone (checked every second while idle), so no rank outlives its engine.
"""

from __future__ import annotations

import contextlib
import os
import signal
import traceback
from multiprocessing.connection import Connection
from typing import Any, NamedTuple

from runtime.config import EngineConfig, KernelConfig
from runtime.kv.manager import TierSpec

__all__ = ["Failed", "Hello", "Ready", "RunnerPlan", "worker_main"]

IDLE_POLL_S = 1.0  # how often an idle rank checks that rank 0's process is still there


class Hello(NamedTuple):
    pid: int


class Ready(NamedTuple):
    pass


class Failed(NamedTuple):
    error: str  # the rank's traceback


class RunnerPlan(NamedTuple):
    """What rank 0 decided for every rank's model runner: its KV pool plan and the kernel settings."""

    tiers: tuple[TierSpec, ...]
    kv_dtype: Any  # torch.dtype
    num_cpu_blocks: tuple[int, ...]
    kernel: KernelConfig
    max_num_seqs: int


def worker_main(config: EngineConfig, rank: int, port: int, conn: Connection, parent_pid: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: rank 0 decides
    try:
        _run(config, rank, port, conn, parent_pid)
    except BaseException:
        with contextlib.suppress(OSError):
            conn.send(Failed(traceback.format_exc()))
        raise SystemExit(1) from None


def _run(config: EngineConfig, rank: int, port: int, conn: Connection, parent_pid: int) -> None:
    import torch

    from runtime.distributed.group import RankGroup, join_store, rank_device
    from runtime.kv.manager import KVCacheManager
    from runtime.model.loader import load_model
    from runtime.model.parallel import shard_model
    from runtime.placement import resolve_device, resolve_dtype
    from runtime.runner import ModelRunner

    conn.send(Hello(os.getpid()))
    size = config.tensor_parallel_size
    device = rank_device(resolve_device(config.device), rank)
    if device.type == "cpu":  # the ranks share the cores: one rank's OpenMP threads waiting on another's is slow
        torch.set_num_threads(max(1, torch.get_num_threads() // size))
    group = RankGroup(join_store(port, size), rank, size, device)
    model = shard_model(load_model(config.model.name, resolve_dtype(config.model.dtype, device), device,
                                   config.model.seed), group)
    plan = _receive(conn, parent_pid)
    if plan is None:
        return
    kv = KVCacheManager(plan.tiers, enable_prefix_caching=False, watermark=0.0)  # tables only: rank 0's, per step
    runner = ModelRunner(model, kv, plan.kernel, plan.kv_dtype, plan.num_cpu_blocks, device, plan.max_num_seqs)
    conn.send(Ready())
    while (step := _receive(conn, parent_pid)) is not None:
        step.apply_tables(kv)
        runner.execute(step.output())


def _receive(conn: Connection, parent_pid: int) -> Any:
    """The next message from rank 0; None once it said stop, closed its end or is gone."""
    try:
        while not conn.poll(IDLE_POLL_S):
            if os.getppid() != parent_pid:
                return None
        return conn.recv()
    except (EOFError, OSError):
        return None
