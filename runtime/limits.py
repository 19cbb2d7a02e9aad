"""The effective limits of an engine for a config and a model, every cap applied (no torch).

One rule each, used by the engine at start and by anything that plans without one (the tuner's
parent process sizing its traffic): the longest request (`max_model_len`), the per-step token
budget, the block-size tiers that budget is served from.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from runtime.config import DEFAULT_CHUNKED_BUDGET, BlockTier, ConfigError, EngineConfig, KernelConfig
from runtime.model.info import ModelInfo

if TYPE_CHECKING:
    from runtime.scheduler import ScheduledSeq

__all__ = ["MAX_CAPTURED_BATCH", "EngineLimits", "check_tensor_parallel", "decode_graphs_on", "engine_limits",
           "graph_buckets", "padded_tokens", "piecewise_bucket", "piecewise_buckets", "piecewise_graphs_on"]

MAX_CAPTURED_BATCH = 512  # larger decode batches run eagerly (vLLM's default largest capture size, too)


class EngineLimits(NamedTuple):
    max_model_len: int  # prompt + generated tokens of one request, at most
    max_num_batched_tokens: int  # tokens computed per engine step, at most
    tiers: tuple[BlockTier, ...]  # the effective block-size tiers (the last ends at max_model_len)


def engine_limits(config: EngineConfig, info: ModelInfo) -> EngineLimits:
    """Limits of an engine of `config` on `info`'s model; a ConfigError names the key that cannot hold."""
    check_tensor_parallel(config.tensor_parallel_size, info)
    max_model_len = _max_model_len(config, info)
    return EngineLimits(max_model_len, _budget(config, max_model_len), config.cache.tiers(max_model_len))


def check_tensor_parallel(size: int, info: ModelInfo) -> None:
    """Each rank holds whole attention heads (query and KV) and an equal slice of the MLP, as vLLM requires."""
    for what, count in (("query heads", info.num_heads), ("KV heads", info.num_kv_heads),
                        ("MLP columns (intermediate_size)", info.intermediate_size)):
        if count % size:
            sizes = [d for d in range(1, info.num_kv_heads + 1) if not (
                info.num_heads % d or info.num_kv_heads % d or info.intermediate_size % d)]
            raise ConfigError(f"tensor_parallel_size ({size}) must divide the model's {what} ({count}); "
                              f"{info.name} can be split over {sizes}")


def _max_model_len(config: EngineConfig, info: ModelInfo) -> int:
    """The model's limit, or the configured one. Sliding-window attention is not implemented: within the
    window it equals full attention, so a windowed model is capped at its window, exactly."""
    window = info.sliding_window
    limit = min(info.max_position_embeddings, window or info.max_position_embeddings)
    wanted = config.scheduler.max_model_len or limit
    if wanted > limit:
        why = f"sliding window ({window})" if window and window < info.max_position_embeddings else \
            f"max_position_embeddings ({limit})"
        raise ConfigError(f"scheduler.max_model_len ({wanted}) exceeds the model's {why}")
    return wanted


def _budget(config: EngineConfig, max_model_len: int) -> int:
    """The per-step token budget; without chunked prefill it must hold a whole prompt."""
    sched = config.scheduler
    budget = sched.max_num_batched_tokens or (DEFAULT_CHUNKED_BUDGET if sched.enable_chunked_prefill
                                              else max_model_len)
    if not sched.enable_chunked_prefill and budget < max_model_len:
        raise ConfigError(
            f"scheduler.max_num_batched_tokens ({budget}) must be >= max_model_len ({max_model_len}) "
            "when scheduler.enable_chunked_prefill is false")
    return budget


def decode_graphs_on(kernel: KernelConfig, num_tiers: int, cuda_triton: bool) -> bool:
    """Whether an engine captures decode graphs: `kernel.cuda_graphs`, or for null wherever they can run (a CUDA
    device with Triton attention, `cuda_triton`, and one tier), as vLLM captures unless told --enforce-eager."""
    if kernel.cuda_graphs is None:
        return cuda_triton and num_tiers == 1
    return kernel.cuda_graphs


def async_scheduling_on(config: EngineConfig, device_type: str) -> bool:
    """Whether an engine on a `device_type` device steps under async scheduling: `scheduler.async_scheduling`,
    or for null on one CUDA device (vLLM's default where it is supported); never on several ranks."""
    flag = config.scheduler.async_scheduling
    if flag is None:
        return device_type == "cuda" and config.tensor_parallel_size == 1
    return flag


def graph_bucket(sizes: list[int], scheduled: Sequence[ScheduledSeq]) -> int | None:
    """The captured batch size a decode step replays, padded up (None: the step runs eagerly): every
    sequence decodes one token and samples, and the step fits the largest capture."""
    if not sizes or not 0 < len(scheduled) <= sizes[-1]:
        return None
    for s in scheduled:
        if s.num_new_tokens != 1 or not s.sample:
            return None
    return sizes[bisect.bisect_left(sizes, len(scheduled))]  # sizes ascend: the first that holds the step


def graph_buckets(max_batch: int) -> list[int]:
    """Padded decode batch sizes a CUDA-graph engine captures: 1, 2, 4, then multiples of 8 up to max_batch
    (at most 512). A decode step of 13 sequences replays the graph of 16."""
    top = min(max_batch, MAX_CAPTURED_BATCH)
    sizes = [b for b in (1, 2, 4) if b < top] + list(range(8, top + 8, 8))
    return [b for b in sizes if b < top + 8]


def piecewise_graphs_on(kernel: KernelConfig, cuda_triton: bool) -> bool:
    """Whether an engine captures piecewise graphs (every step up to `kernel.max_cudagraph_capture_size`
    tokens, any tiers): wherever graphs can run (`cuda_triton`) unless `kernel.cuda_graphs` is false or the
    size is 0."""
    return cuda_triton and kernel.cuda_graphs is not False and kernel.max_cudagraph_capture_size > 0


def padded_tokens(num_tokens: int, pad_multiple: int) -> int:
    """A step's token count as its inputs are built: padded up to a multiple of `kernel.pad_multiple`."""
    return num_tokens + -num_tokens % pad_multiple


def piecewise_bucket(sizes: list[int], num_tokens: int) -> int | None:
    """The piecewise graphs' bucket a step of `num_tokens` (padded) tokens replays: the smallest of `sizes`
    (ascending, `piecewise_buckets`) that holds it; None past the largest, or with no capture: it runs eagerly."""
    i = bisect.bisect_left(sizes, num_tokens)
    return sizes[i] if i < len(sizes) and num_tokens > 0 else None


def piecewise_buckets(max_tokens: int) -> list[int]:
    """Padded token counts of the piecewise graphs: 8 to 32 by 8, to 128 by 16, to 256 by 32, then by 64
    up to `max_tokens` (rounded up to a bucket). At these sizes a step's GEMMs are bound by reading the
    weights, so a padded row costs little; the steps in between replay the next bucket up."""
    ladder = [8, 16, 24, 32, *range(48, 129, 16), *range(160, 257, 32), *range(320, max(max_tokens, 8) + 64, 64)]
    return [b for b in ladder if b - max_tokens < (8 if b <= 32 else 16 if b <= 128 else 32 if b <= 256 else 64)]
