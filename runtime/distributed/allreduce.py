"""`python -m runtime.distributed.allreduce PROFILE [--degrees 2 4]`: one all-reduce's cost at each tensor-parallel
degree, measured on this machine's devices (NCCL on GPUs, gloo on CPU), written into the GPU profile's `allreduce`
field, where the simulator reads it (`runtime.sim.parallel`) in place of its unmeasured estimate.

Each degree: that many ranks spawned (the group `RankGroup` builds, as an engine's ranks do), a warm-up, then the
median time of `REPEATS` all-reduces of each size in `SIZES`, in the profile's dtype; a line of least relative error
`latency_s + bytes x s_per_byte` through the medians.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import statistics
import time
from multiprocessing.connection import Connection

import numpy as np
import torch

from runtime.distributed.group import RankGroup, host_store, join_store, rank_device, turn_nvls_off
from runtime.sim.profile_file import load_profile, save_profile

__all__ = ["fit_line", "measure_allreduce"]

SIZES = (1 << 12, 1 << 16, 1 << 20, 1 << 24)  # bytes: a decode step's hidden states up to a long prefill's
REPEATS = 20
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _rank(rank: int, size: int, port: int, device: str, dtype: str, sizes: tuple[int, ...], repeats: int,
          conn: Connection) -> None:
    dev = rank_device(torch.device(device), rank)
    group = RankGroup(join_store(port, size), rank, size, dev)
    medians = []
    for nbytes in sizes:
        t = torch.ones(nbytes // _DTYPES[dtype].itemsize, dtype=_DTYPES[dtype], device=dev)
        times = []
        for i in range(repeats + 3):  # 3 warm-up calls
            _sync(dev)
            start = time.perf_counter()
            group.all_reduce(t)
            _sync(dev)
            if i >= 3:
                times.append(time.perf_counter() - start)
        medians.append(statistics.median(times))
    if rank == 0:
        conn.send(medians)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_allreduce(degree: int, device: str, dtype: str, sizes: tuple[int, ...] = SIZES,
                      repeats: int = REPEATS) -> list[float]:
    """Median seconds of one all-reduce of each size over `degree` ranks on `device` (cpu or cuda)."""
    turn_nvls_off()
    store = host_store(degree)
    ctx = multiprocessing.get_context("spawn")
    mine, theirs = ctx.Pipe(duplex=False)
    procs = [ctx.Process(target=_rank, args=(r, degree, store.port, device, dtype, sizes, repeats, theirs))
             for r in range(degree)]
    for p in procs:
        p.start()
    theirs.close()
    try:
        return mine.recv()
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()


def fit_line(sizes: tuple[int, ...], seconds: list[float]) -> tuple[float, float]:
    """(latency_s, s_per_byte) of the line through (bytes, seconds) with the least relative error, neither below
    0. Why relative: the sizes span four orders of magnitude, and a plain least-squares line follows the largest
    size's time, whose noise alone (a few percent of milliseconds) could set the latency to any value, 0
    included; weighted by 1 / time, the small sizes set the latency and the large ones the slope."""
    times = np.asarray(seconds, dtype=float)
    slope, intercept = np.polyfit(np.asarray(sizes, dtype=float), times, 1, w=1.0 / times)
    return max(float(intercept), 0.0), max(float(slope), 0.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runtime.distributed.allreduce", description=__doc__)
    parser.add_argument("profile", help="the GPU profile to write the costs into (python -m runtime.profile)")
    parser.add_argument("--degrees", type=int, nargs="+", default=[2])
    args = parser.parse_args(argv)
    profile = load_profile(args.profile)
    device = "cuda" if profile.device.type == "cuda" else "cpu"
    costs = dict(profile.allreduce)
    for degree in args.degrees:
        seconds = measure_allreduce(degree, device, profile.dtype)
        costs[str(degree)] = fit_line(SIZES, seconds)
        print(f"TP {degree}: " + ", ".join(f"{n} B {s * 1e6:.1f} us" for n, s in zip(SIZES, seconds))
              + f" -> {costs[str(degree)][0] * 1e6:.1f} us + {costs[str(degree)][1] * 1e9:.4f} ns/byte", flush=True)
    save_profile(dataclasses.replace(profile, allreduce=costs), args.profile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
