"""Which projections run the skinny Triton GEMM on steps of few rows: timed against cuBLAS when an engine
starts (`kernel.skinny_gemm`), never guessed.

For every weight shape of the model (qkv, o, gate/up, down, LM head) and every row bucket (1, 2, 4, 8, 16
rows: a decode step of that many sequences), one pass applies each layer of that shape in turn, so every
weight is read from HBM as in a step (one layer's weight alone would sit in the 50 MB L2 after its first
call). cuBLAS's pass and each candidate launch's are timed with CUDA events, the median of `REPEATS`; a
candidate is kept only if it beats cuBLAS by `MARGIN`, below which the noise of a shared GPU decides:

    for each shape (N x K, the L layers that have it), for each bucket of M rows:
        cuBLAS pass:   F.linear(x [M, K], W_l) for l = 1..L          median of REPEATS
        skinny passes: the same with each of `CANDIDATES`           the fastest of them
        picked:        skinny time < MARGIN x cuBLAS time           else cuBLAS

The picks go onto the layers (`Linear.skinny`) before any CUDA graph is captured, so graphs bake them in. A
shape is timed once per process and device: every later engine (a study's trials) takes the same picks, so the
picks add nothing to trial-to-trial noise and a start costs no second timing.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F

from kernels.skinny_gemm import CANDIDATES, SkinnyTuning, skinny_linear
from runtime.model.linear import ROW_BUCKETS, Linear, SkinnyPicks

__all__ = ["MARGIN", "ShapeTiming", "clear_skinny", "pick_skinny"]

log = logging.getLogger(__name__)

MARGIN = 0.97  # a skinny launch must take under 97% of cuBLAS's time to replace it
REPEATS = 7  # timed passes per candidate, after two untimed ones
_MEASURED: dict[tuple, list[ShapeTiming]] = {}  # (device, layers, out, in, dtype, bias) -> per row bucket; a memo


class ShapeTiming(NamedTuple):
    """What the start-up timing measured for one weight shape and row bucket."""

    out_features: int
    in_features: int
    layers: int  # how many layers share the shape (one pass applies each)
    rows: int
    cublas_us: float  # median pass time
    best: SkinnyTuning  # the fastest skinny launch ...
    best_us: float  # ... and its median pass time
    picked: bool  # best_us < MARGIN * cublas_us


def pick_skinny(model: torch.nn.Module, time_pass: Callable[[Callable[[], None]], float] | None = None
                ) -> list[ShapeTiming]:
    """Time every `Linear` shape of `model` (on its GPU) and set each layer's picks; returns what was measured.
    `time_pass` (a pass -> its median microseconds) is for tests; CUDA events by default."""
    timer = time_pass or _cuda_median_us
    groups: dict[tuple, list[Linear]] = {}
    for layer in model.modules():
        if isinstance(layer, Linear):
            key = (*layer.weight.shape, layer.weight.dtype, layer.bias is not None)
            groups.setdefault(key, []).append(layer)
    memo = _MEASURED if time_pass is None else {}  # a test's scripted times are not remembered
    timings = []
    for key, layers in groups.items():
        memo_key = (str(layers[0].weight.device), len(layers), *key)
        if memo_key not in memo:
            memo[memo_key] = [_time_bucket(layers, m, timer) for m in ROW_BUCKETS]
        rows = memo[memo_key]
        picks = SkinnyPicks(tuple(t.best if t.picked else None for t in rows))
        for layer in layers:
            layer.skinny = picks
        timings += rows
    for t in timings:
        log.info("skinny GEMM %dx%d x%d, %d rows: cuBLAS %.1f us, skinny %s %.1f us -> %s", t.out_features,
                 t.in_features, t.layers, t.rows, t.cublas_us, tuple(t.best), t.best_us,
                 "skinny" if t.picked else "cuBLAS")
    return timings


def clear_skinny(model: torch.nn.Module) -> list[ShapeTiming]:
    """Every projection back to torch's GEMM (`kernel.skinny_gemm: false`, or a model reused off the GPU); nothing
    measured."""
    for layer in model.modules():
        if isinstance(layer, Linear):
            layer.skinny = SkinnyPicks()
    return []


@torch.inference_mode()
def _time_bucket(layers: list[Linear], rows: int, timer: Callable[[Callable[[], None]], float]) -> ShapeTiming:
    w = layers[0].weight
    x = torch.randn(rows, w.shape[1], dtype=w.dtype, device=w.device,
                    generator=torch.Generator(w.device).manual_seed(rows)) * 0.01
    out = torch.empty(rows, w.shape[0], dtype=w.dtype, device=w.device)

    def cublas() -> None:
        for layer in layers:
            F.linear(x, layer.weight, layer.bias)

    def skinny(tuning: SkinnyTuning) -> Callable[[], None]:
        def run() -> None:
            for layer in layers:
                skinny_linear(x, layer.weight, layer.bias, tuning=tuning, out=out)
        return run

    base = timer(cublas)
    best_us, best = min(((timer(skinny(t)), t) for t in CANDIDATES), key=lambda pair: pair[0])  # ties: listed first
    return ShapeTiming(w.shape[0], w.shape[1], len(layers), rows, base, best, best_us, best_us < MARGIN * base)


def _cuda_median_us(run: Callable[[], None]) -> float:
    run()
    run()  # the first compiles a launch; the second settles clocks and caches
    times = []
    for _ in range(REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return statistics.median(times)
