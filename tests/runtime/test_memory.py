"""KV memory planning on CPU: half of one NUMA node's RAM by default (vLLM's rule), pools committed as used."""

from __future__ import annotations

import pytest
import torch

from runtime import EngineConfig
from runtime.memory import GIB, cpu_device_bytes, numa_node_count
from runtime.placement import plan_placement
from runtime.runner import allocate_caches


def test_cpu_plans_half_of_one_numa_nodes_ram():
    assert cpu_device_bytes(ram_bytes=24 * GIB, numa_nodes=1) == 12 * GIB
    assert cpu_device_bytes(ram_bytes=256 * GIB, numa_nodes=2) == 64 * GIB


def test_this_machine_has_at_least_one_numa_node():
    assert numa_node_count() >= 1


def test_a_cpu_engine_without_device_memory_plans_from_the_machine():
    plan = plan_placement(EngineConfig.from_flat("tiny", device="cpu")).memory
    assert plan.device_bytes == cpu_device_bytes()


def test_an_explicit_device_memory_still_wins():
    plan = plan_placement(EngineConfig.from_flat("tiny", device="cpu", device_memory_gb=0.05)).memory
    assert plan.device_bytes == int(0.05 * GIB)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn])
def test_cpu_pools_are_zero_in_the_dtype_asked(dtype):
    [cache] = allocate_caches((2, 1, 4), [8], [3], dtype, torch.device("cpu"))
    assert (cache.k.shape, cache.k.dtype, cache.v.dtype) == ((2, 3, 8, 1, 4), dtype, dtype)
    assert cache.k.float().abs().sum().item() == 0.0 and cache.v.float().abs().sum().item() == 0.0
    cache.k[1, 2] = 1  # writable, and writes land in the pool
    assert cache.k.float().sum().item() == 32.0
