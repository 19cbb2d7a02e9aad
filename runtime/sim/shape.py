"""What a scheduled step contains, as the step-time model reads it (no torch).

The same rules the model runner applies decide the path and the shape: a pure-decode step of an engine
with decode graphs replays the graph of the smallest bucket that holds it (`runtime.limits.graph_buckets`);
any other step has its token count padded up to `pad_multiple`, then replays the piecewise graphs of the
smallest bucket that holds that (`runtime.limits.piecewise_buckets`), or runs eagerly past the largest.
"""

from __future__ import annotations

from runtime.config import EngineConfig
from runtime.kv.manager import TierSpec
from runtime.limits import graph_bucket, graph_buckets, padded_tokens, piecewise_bucket, piecewise_buckets
from runtime.scheduler import ScheduledSeq
from runtime.sim.stepmodel import MODES, StepShape, Variant


class StepShaper:
    """Turns a step's scheduled sequences into (variant, shape) per tier for one engine's settings.

    `graphs`: the engine replays decode graphs; `piecewise`: it replays piecewise graphs (a real engine: its
    runner has them; a simulated one: the profiled GPU would, `runtime.limits`). Called once per simulated
    step: one pass over the step, the variants built once."""

    def __init__(self, config: EngineConfig, tiers: tuple[TierSpec, ...], graphs: bool,
                 piecewise: bool = False) -> None:
        self.pad_multiple = config.kernel.pad_multiple
        self.buckets = graph_buckets(config.scheduler.max_num_seqs) if graphs else []
        self.pieces = piecewise_buckets(config.kernel.max_cudagraph_capture_size) if piecewise else []
        kv_dtype = config.cache.kv_cache_dtype
        # tier -> path -> its variant
        self.variants = [{mode: Variant(t.block_size, kv_dtype, mode) for mode in MODES} for t in tiers]

    def parts(self, scheduled: tuple[ScheduledSeq, ...]) -> list[tuple[Variant, StepShape]]:
        if not scheduled:
            return []
        graph = graph_bucket(self.buckets, scheduled)
        shapes = _tier_shapes(scheduled)
        first = shapes[0][1]
        if graph is not None:
            first[2], mode = graph, "graph"  # decode rows: the bucket the graph replay fills
        else:  # pad rows join the first tier's prefill, or its decode rows in a pure-decode step
            tokens = prefill = 0
            for _, acc in shapes:
                tokens += acc[0] + acc[2]
                prefill += acc[0]
            padded = padded_tokens(tokens, self.pad_multiple)
            bucket = piecewise_bucket(self.pieces, padded)
            mode, rows = ("eager", padded) if bucket is None else ("piecewise", bucket)
            first[0 if prefill else 2] += rows - tokens
        return [(self.variants[tier][mode], StepShape(*acc)) for tier, acc in shapes]


def _tier_shapes(scheduled: tuple[ScheduledSeq, ...]) -> list[tuple[int, list[int]]]:
    """(tier, [prefill tokens, prefill attention, decode rows, decode context]) per run of one tier, in one
    pass (the step is sorted by tier). Single-token items are decode rows, as the input builder groups them."""
    out: list[tuple[int, list[int]]] = []
    tier, acc = -1, [0, 0, 0, 0]
    for s in scheduled:
        if s.seq.tier != tier:
            tier, acc = s.seq.tier, [0, 0, 0, 0]
            out.append((tier, acc))
        n = s.num_new_tokens
        if n == 1:
            acc[2] += 1
            acc[3] += s.start + 1
        else:
            acc[0] += n
            acc[1] += n * (s.start + n)
    return out
