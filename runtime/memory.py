"""KV pool sizing: gpu_memory_utilization x device memory - weights - peak activations.

On CUDA the activation peak is measured by a profile forward at max_num_batched_tokens; on CPU
the peak is estimated from the model's shapes, and the device memory is `cache.device_memory_gb` or, when
null, half the RAM of one NUMA node (vLLM's CPU backend without VLLM_CPU_KVCACHE_SPACE). No torch: the
simulator (`runtime.sim`) sizes its pool with these same functions from a GPU profile's figures.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import NamedTuple

from runtime.config import BlockTier, ConfigError
from runtime.kv.manager import TierSpec

GIB = 1 << 30
CPU_MEMORY_SHARE = 0.5  # of one NUMA node's RAM, planned on CPU when cache.device_memory_gb is null (vLLM's rule)
_NUMA_NODES = "/sys/devices/system/node"


class InsufficientMemoryError(ConfigError):
    """The KV pool cannot hold one request of max_model_len; raised at engine start."""


class MemoryPlan(NamedTuple):
    device_bytes: int
    budget_bytes: int  # gpu_memory_utilization x device_bytes
    weight_bytes: int
    activation_bytes: int
    kv_bytes: int  # what is left for the KV pools
    num_blocks: tuple[int, ...]  # per tier
    num_cpu_blocks: tuple[int, ...]  # per tier (swap space)

    def tier_specs(self, tiers: Sequence[BlockTier]) -> tuple[TierSpec, ...]:
        """The KV manager's tiers: each block tier with the blocks this plan gives it."""
        return tuple(TierSpec(t.max_len, t.block_size, n, c)
                     for t, n, c in zip(tiers, self.num_blocks, self.num_cpu_blocks))


def cpu_device_bytes(ram_bytes: int | None = None, numa_nodes: int | None = None) -> int:
    """The memory a CPU engine plans with by default: `CPU_MEMORY_SHARE` of one NUMA node's share of the
    machine's RAM, as vLLM's CPU backend sizes its KV space when VLLM_CPU_KVCACHE_SPACE is unset. The
    pools are committed page by page as blocks are first written (`runtime.runner.allocate_caches`), so a
    large plan costs only what is used."""
    ram = machine_ram_bytes() if ram_bytes is None else ram_bytes
    nodes = numa_node_count() if numa_nodes is None else numa_nodes
    return int(ram // nodes * CPU_MEMORY_SHARE)


def machine_ram_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def numa_node_count() -> int:
    """NUMA nodes listed by Linux's sysfs; 1 where there is none (macOS, containers without sysfs)."""
    try:
        names = os.listdir(_NUMA_NODES)
    except OSError:
        return 1
    return max(1, sum(re.fullmatch(r"node\d+", n) is not None for n in names))


def kv_bytes_per_block(layout: tuple[int, int, int], block_size: int, dtype_bytes: int) -> int:
    """K and V of every layer for one block: 2 x layers x block_size x kv_heads x head_dim x bytes."""
    layers, kv_heads, head_dim = layout
    return 2 * layers * block_size * kv_heads * head_dim * dtype_bytes


def estimate_activation_bytes(hf_config, num_tokens: int, num_seqs: int, elt: int) -> int:
    """CPU estimate of the forward's peak (`elt` bytes per value): a few hidden-sized buffers per token, the
    MLP, the logits."""
    per_token = 6 * hf_config.hidden_size + 3 * hf_config.intermediate_size
    return num_tokens * per_token * elt + 3 * num_seqs * hf_config.vocab_size * 4


def plan_memory(*, device_bytes: int, utilization: float, weight_bytes: int, activation_bytes: int,
                tiers: Sequence[BlockTier], layout: tuple[int, int, int], kv_dtype_bytes: int,
                swap_space_gb: float, num_blocks_override: int | None) -> MemoryPlan:
    """Split the KV budget over the tiers by share; fail clearly if one tier cannot hold its longest request."""
    budget = int(utilization * device_bytes)
    kv_bytes = budget - weight_bytes - activation_bytes
    per_block = [kv_bytes_per_block(layout, t.block_size, kv_dtype_bytes) for t in tiers]
    if num_blocks_override is not None:
        blocks = tuple(max(1, int(num_blocks_override * t.share)) for t in tiers)
    else:
        blocks = tuple(max(0, int(kv_bytes * t.share) // b) for t, b in zip(tiers, per_block))
    cpu = tuple(int(swap_space_gb * GIB * t.share) // b for t, b in zip(tiers, per_block))
    plan = MemoryPlan(device_bytes, budget, weight_bytes, activation_bytes, kv_bytes, blocks, cpu)
    for i, (tier, n) in enumerate(zip(tiers, blocks)):
        need = -(-tier.max_len // tier.block_size)
        if n < need:
            raise InsufficientMemoryError(_too_small_message(plan, i, tier, n, need))
    return plan


def _too_small_message(plan: MemoryPlan, i: int, tier: BlockTier, have: int, need: int) -> str:
    return (
        f"cache: KV pool of tier {i} (block_size {tier.block_size}) holds {have} blocks but one request of "
        f"{tier.max_len} tokens needs {need}. Budget {plan.budget_bytes / GIB:.2f} GiB "
        f"(gpu_memory_utilization x {plan.device_bytes / GIB:.2f} GiB) - weights {plan.weight_bytes / GIB:.2f} GiB "
        f"- activations {plan.activation_bytes / GIB:.2f} GiB leaves {plan.kv_bytes / GIB:.3f} GiB for KV. "
        "Raise cache.gpu_memory_utilization or cache.device_memory_gb, lower scheduler.max_model_len or "
        "scheduler.max_num_batched_tokens, or give this tier a larger share."
    )
