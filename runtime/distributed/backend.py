"""The model backend of a tensor-parallel engine: rank 0 schedules, samples and drives every rank.

    rank 0 (the engine's process)                            ranks 1..n-1 (`runtime.distributed.worker`)
    schedule -> ParallelRunner.execute(out)
                  StepMessage.of(out) -- pipe, pickled -->   the same step rebuilt, ModelRunner.execute
                  ModelRunner.execute(out)                   (each layer: 2 all-reduces; the head: 1 gather)
                  logits [N, V] (gathered) <-- collectives -->
    sample (rank 0 only)

Every rank's KV pool is rank 0's plan: the weights and KV heads of one rank on one device (`placement`, on
the cut model). Steps run eagerly (no CUDA graphs yet, `eager`) and the CUDA activation profile is replaced
by the estimate (a profile forward would wait on the other ranks' collectives).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from runtime.backend import Backend, placed_backend
from runtime.config import ConfigError, EngineConfig, KernelConfig
from runtime.distributed.ranks import RankFailedError, RankProcesses
from runtime.distributed.step import StepMessage
from runtime.distributed.worker import RunnerPlan
from runtime.kv.manager import KVCacheManager
from runtime.limits import engine_limits
from runtime.model.info import model_info
from runtime.scheduler import SchedulerOutput

if TYPE_CHECKING:
    import torch

    from runtime.model.llama import LlamaForCausalLM
    from runtime.runner import ModelRunner

__all__ = ["ParallelRunner", "eager", "parallel_backend"]


def eager(kernel: KernelConfig) -> KernelConfig:
    """The kernel settings of a tensor-parallel rank: no CUDA graphs (the collectives are not captured yet)."""
    return replace(kernel, cuda_graphs=False, max_cudagraph_capture_size=0)


def parallel_backend(config: EngineConfig, model: LlamaForCausalLM | None = None) -> Backend:
    """Start the ranks, load and cut rank 0's shard, plan its memory; each rank builds its runner with the
    engine's (`make_runner`)."""
    from runtime.model.loader import load_model
    from runtime.model.parallel import shard_model
    from runtime.placement import plan_placement, resolve_dtype

    if model is not None:
        raise ConfigError("tensor_parallel_size: a loaded model cannot be reused; every rank loads its own shard")
    engine_limits(config, model_info(config.model.name))  # the degree checked before any rank starts
    ranks = RankProcesses(config)
    try:
        device = ranks.group.device
        whole = load_model(config.model.name, resolve_dtype(config.model.dtype, device), device, config.model.seed)
        p = plan_placement(config, shard_model(whole, ranks.group))
    except BaseException:
        ranks.close()
        raise
    kernel = eager(config.kernel)

    def make_runner(kv: KVCacheManager) -> ParallelRunner:
        from runtime.runner import ModelRunner

        max_seqs = config.scheduler.max_num_seqs
        ranks.start_runners(RunnerPlan(kv.tiers, p.kv_dtype, p.memory.num_cpu_blocks, kernel, max_seqs))
        local = ModelRunner(p.model, kv, kernel, p.kv_dtype, p.memory.num_cpu_blocks, p.device, max_seqs)
        return ParallelRunner(local, ranks, kv)

    return placed_backend(config, p, make_runner)


class ParallelRunner:
    """Rank 0's model runner: each step sent to every rank, then run here; any failure stops every rank."""

    def __init__(self, local: ModelRunner, ranks: RankProcesses, kv: KVCacheManager) -> None:
        self.local, self.ranks, self.kv = local, ranks, kv
        self.error: BaseException | None = None

    def __getattr__(self, name: str) -> Any:  # paths, graphs, caches, model: the local runner's
        return getattr(self.local, name)

    def execute(self, out: SchedulerOutput) -> torch.Tensor:
        if self.error is not None:
            raise RankFailedError(f"the tensor-parallel ranks were stopped by an earlier error: {self.error}")
        try:
            self.ranks.send(StepMessage.of(out, self.kv))
            return self.local.execute(out)
        except BaseException as e:
            failed = self.ranks.failure()
            self.error = failed or e
            self.ranks.close()
            if failed is None:
                raise
            raise failed from e

    def close(self) -> None:
        self.ranks.close()
