"""What a scheduled step contains, as the step-time model reads it (no torch).

The same rules the model runner applies decide the shape: a pure-decode step of a graphs engine
replays the graph of the smallest bucket that holds it (`runtime.limits.graph_buckets`); any other step
runs eagerly with its token count padded up to `pad_multiple`.
"""

from __future__ import annotations

from itertools import groupby

from runtime.config import EngineConfig
from runtime.kv.manager import TierSpec
from runtime.limits import graph_bucket, graph_buckets
from runtime.scheduler import ScheduledSeq
from runtime.sim.stepmodel import StepShape, Variant


class StepShaper:
    """Turns a step's scheduled sequences into (variant, shape) per tier for one engine's settings.

    `graphs`: the engine replays decode graphs (a real engine: its runner has them; a simulated one: the
    profiled GPU would, `runtime.limits.decode_graphs_on`)."""

    def __init__(self, config: EngineConfig, tiers: tuple[TierSpec, ...], graphs: bool) -> None:
        self.block_sizes = [t.block_size for t in tiers]
        self.kv_dtype = config.cache.kv_cache_dtype
        self.pad_multiple = config.kernel.pad_multiple
        self.buckets = graph_buckets(config.scheduler.max_num_seqs) if graphs else []

    def parts(self, scheduled: tuple[ScheduledSeq, ...]) -> list[tuple[Variant, StepShape]]:
        if not scheduled:
            return []
        graph = self._graph_bucket(scheduled)
        parts = [(Variant(self.block_sizes[tier], self.kv_dtype, graph is not None), _shape(list(items)))
                 for tier, items in groupby(scheduled, key=lambda s: s.seq.tier)]
        variant, first = parts[0]
        if graph is not None:
            parts[0] = (variant, first._replace(decode_seqs=graph))
            return parts
        tokens = sum(s.num_new_tokens for s in scheduled)
        pad = -tokens % self.pad_multiple
        has_prefill = any(shape.prefill_tokens for _, shape in parts)
        parts[0] = (variant, first._replace(prefill_tokens=first.prefill_tokens + pad) if has_prefill
                    else first._replace(decode_seqs=first.decode_seqs + pad))
        return parts

    def _graph_bucket(self, scheduled: tuple[ScheduledSeq, ...]) -> int | None:
        """The bucket a graph replay pads this step to, or None when it runs eagerly (the runner's rule)."""
        return graph_bucket(self.buckets, scheduled)


def _shape(items: list[ScheduledSeq]) -> StepShape:
    """One tier's part: single-token items are decode rows (as the input builder groups them)."""
    decodes = [s for s in items if s.num_new_tokens == 1]
    chunks = [s for s in items if s.num_new_tokens != 1]
    return StepShape(
        prefill_tokens=sum(s.num_new_tokens for s in chunks),
        prefill_attention=sum(s.num_new_tokens * (s.start + s.num_new_tokens) for s in chunks),
        decode_seqs=len(decodes),
        decode_context=sum(s.start + 1 for s in decodes))
