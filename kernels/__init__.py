"""Attention kernels on the paged KV cache and the fused layer kernels around them: Triton kernels,
their torch references, and the dispatch.

The runtime calls the dispatch entry points (`write_kv`, `decode_attention`, `prefill_attention`,
`rms_norm`, `apply_rotary`, `silu_and_mul`, each taking `use_triton`). The kernel-level functions
are importable for tests and benchmarks (the Triton KV write itself is `kernels.kv_write.write_kv`,
the fused norm `kernels.norm.rms_norm`). Importing this package never needs a working
Triton: only launching a Triton kernel does.
"""

from __future__ import annotations

from kernels._triton import triton_available
from kernels.dispatch import (
    apply_rotary,
    decode_attention,
    plan_prefill,
    prefill_attention,
    rms_norm,
    silu_and_mul,
    write_kv,
)
from kernels.kv_write import write_kv_reference
from kernels.paged_decode import paged_decode, paged_decode_reference
from kernels.paged_prefill import paged_prefill, paged_prefill_reference

__all__ = [
    "apply_rotary",
    "decode_attention",
    "paged_decode",
    "paged_decode_reference",
    "paged_prefill",
    "paged_prefill_reference",
    "plan_prefill",
    "prefill_attention",
    "rms_norm",
    "silu_and_mul",
    "triton_available",
    "write_kv",
    "write_kv_reference",
]
