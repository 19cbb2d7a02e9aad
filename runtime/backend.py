"""What an engine's steps run on besides its scheduler and KV manager: a `Backend` (no torch at import).

    model_backend(config, model)   the weights placed, the KV pool sized (`runtime.placement`), the model
                                   runner and the sampler: torch is imported when it is built
    runtime.sim.sim_backend        a model-free runner that advances a virtual clock by a step-time model

The engine asks a backend for its limits (max_model_len, token budget, tiers with their pool sizes, the
vocabulary and EOS ids), builds the runner over its own KV manager, and samples through its sampler.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from runtime.config import EngineConfig
from runtime.kv.manager import KVCacheManager, TierSpec
from runtime.limits import async_scheduling_on
from runtime.sampling_params import SamplingParams
from runtime.scheduler import SchedulerOutput

if TYPE_CHECKING:
    from runtime.model.llama import LlamaForCausalLM
    from runtime.placement import Placement

SampleRows = list[list[tuple[int, int, SamplingParams]]]  # per sampling group: (seq_id, seed, params) each


class PreviousTokens(NamedTuple):
    """The rows of a step whose input token the host does not know yet (`scheduler.async_scheduling`): the
    previous step sampled it, and it is still on the device."""

    tokens: Any  # the previous step's sampled tokens on the device, [M] (`runtime.deferred.DeferredTokens.device`)
    rows: list[int]  # the step's flat input rows to fill ...
    src: list[int]  # ... each from tokens[src[i]]


class StepRunner(Protocol):
    """Runs a scheduled step: the model runner (logits), or the simulator's (`runtime.sim`, which never gets
    `previous`: a simulated engine steps synchronously)."""

    def execute(self, out: SchedulerOutput, previous: PreviousTokens | None = None) -> Any: ...


class TokenSampler(Protocol):
    """Draws one token per row from what `StepRunner.execute` returned; forgets a retired sequence."""

    def sample(self, logits: Any, rows: SampleRows) -> list[list[int]]: ...

    def sample_deferred(self, logits: Any, rows: SampleRows) -> Any:
        """The tokens left on the device (`runtime.deferred.DeferredTokens`), or None: sample on the host."""

    def forget(self, seq_id: int) -> None: ...


class Backend(NamedTuple):
    """What an engine runs on, besides its scheduler and KV manager: the model and its memory plan
    (`model_backend`), or a model-free step-time simulator (`runtime.sim.sim_backend`)."""

    max_model_len: int
    max_num_batched_tokens: int
    tiers: tuple[TierSpec, ...]  # per tier: max_len, block_size, device and CPU blocks
    vocab_size: int
    eos_ids: frozenset[int]
    make_runner: Callable[[KVCacheManager], StepRunner]  # over the engine's KV manager
    sampler: TokenSampler
    placement: Placement | None  # None for a model-free backend


def model_backend(config: EngineConfig, model: LlamaForCausalLM | None = None) -> Backend:
    """The real backend: weights placed (or `model` reused), the KV pool sized, the model runner and sampler;
    over several ranks when `tensor_parallel_size` > 1 (`runtime.distributed`)."""
    if config.tensor_parallel_size > 1:
        from runtime.distributed.backend import parallel_backend

        return parallel_backend(config, model)
    from runtime.placement import plan_placement  # torch: only an engine on a model imports it
    from runtime.runner import ModelRunner

    p = plan_placement(config, model)

    def make_runner(kv: KVCacheManager) -> ModelRunner:
        return ModelRunner(p.model, kv, config.kernel, p.kv_dtype, p.memory.num_cpu_blocks, p.device,
                           config.scheduler.max_num_seqs,
                           non_blocking=async_scheduling_on(config, p.device.type))

    return placed_backend(config, p, make_runner)


def placed_backend(config: EngineConfig, p: Placement, make_runner: Callable[[KVCacheManager], StepRunner]) -> Backend:
    """A model's backend from its placement and how its runner is built (one device, or rank 0 of several)."""
    from runtime.sampler import Sampler

    eos = p.model.config.eos_token_id
    return Backend(p.max_model_len, p.max_num_batched_tokens, p.tiers, p.model.config.vocab_size,
                   frozenset([] if eos is None else [eos] if isinstance(eos, int) else eos), make_runner,
                   Sampler(half_topk=config.kernel.sampler_half_topk), p)
