"""Timing for the benchmarks: a GPU call's median time, the device's copy ceiling, a phase timer."""

from __future__ import annotations

import time
from typing import Any


def time_ms(fn, *, graph: bool) -> float:
    """Median time of fn() in ms: CUDA events around eager calls, or around CUDA-graph replays of many
    calls (device time without Python launch overhead, for work too short to hide it)."""
    import triton.testing

    if graph:
        return triton.testing.do_bench_cudagraph(fn, rep=100, return_mode="median")
    return triton.testing.do_bench(fn, warmup=50, rep=200, return_mode="median")


def copy_ceiling_tbs() -> float:
    """Device-to-device copy of 4 GiB of bf16, counting bytes read plus written."""
    import torch

    src = torch.randn(2 * 1024**3, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), graph=False)  # why eager: a captured copy runs on the copy engines
    return 2 * src.numel() * 2 / ms / 1e9


def time_phase(obj: Any, name: str, spent: dict[str, float], phase: str) -> None:
    """Wrap `obj.name` so that each call adds its wall time to `spent[phase]` (the profilers' phase timer)."""
    inner = getattr(obj, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[phase] = spent.get(phase, 0.0) + time.perf_counter() - start

    setattr(obj, name, timed)
