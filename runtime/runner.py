"""The model runner: owns the KV tensors, applies block copies and swaps, runs the forward pass."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from itertools import groupby

import numpy as np
import torch

from kernels.fa4_prefill import unavailable as fa4_unavailable
from runtime.attention import KVCache
from runtime.backend import PreviousTokens
from runtime.config import ConfigError, KernelConfig
from runtime.cuda_graphs import DecodeGraphs
from runtime.deferred import feed_previous, host_to_device
from runtime.inputs import build_inputs
from runtime.kv.manager import BlockCopy, KVCacheManager
from runtime.limits import decode_graphs_on, piecewise_graphs_on
from runtime.model.llama import LlamaForCausalLM
from runtime.piecewise import PiecewiseGraphs
from runtime.scheduler import SchedulerOutput
from runtime.skinny import clear_skinny, pick_skinny


def allocate_caches(layout: tuple[int, int, int], block_sizes: Iterable[int], num_blocks: Iterable[int],
                    dtype: torch.dtype, device: torch.device, swap: bool = False) -> list[KVCache]:
    """Device pools are zeroed: kernels read whole blocks and mask the tail, and 0 x garbage can be NaN
    (on CPU from calloc's zero pages, committed as blocks are first written, so a pool planned from the
    machine's RAM costs what is used). Swap pools are left uninitialised (host pages are only committed
    when a block is swapped out, and a swapped-out block is always written whole before it is read back);
    pinned when the device is CUDA."""
    layers, kv_heads, head_dim = layout
    pin = swap and torch.cuda.is_available()
    make = torch.empty if swap else _zeros_cpu if device.type == "cpu" else torch.zeros
    caches = []
    for bs, n in zip(block_sizes, num_blocks):
        shape = (layers, n, bs, kv_heads, head_dim)  # [L, N, block_size, Hkv, D]
        caches.append(KVCache(make(shape, dtype=dtype, device=device, pin_memory=pin),
                              make(shape, dtype=dtype, device=device, pin_memory=pin)))
    return caches


def _zeros_cpu(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, pin_memory: bool) -> torch.Tensor:
    """torch.zeros writes every page at once; numpy's zeros asks calloc, whose fresh pages are zero
    untouched. Viewed as `dtype` through a numpy type of its width (numpy has no bfloat16 or fp8)."""
    carrier = {1: np.uint8, 2: np.uint16, 4: np.float32, 8: np.float64}[dtype.itemsize]
    return torch.from_numpy(np.zeros(shape, dtype=carrier)).view(dtype)


def _copy_blocks(copies: tuple[BlockCopy, ...], src: list[KVCache], dst: list[KVCache]) -> None:
    """Copy whole blocks (every layer) grouped by tier: dst[:, d] = src[:, s]. The block ids go to the device
    without waiting for it; a swap-out waits for its copy to the host before the host writes the CPU pool."""
    for tier, group in groupby(copies, key=lambda c: c.tier):
        items = list(group)
        s_idx = host_to_device([c.src for c in items], np.int64, src[tier].k.device)
        d_idx = host_to_device([c.dst for c in items], np.int64, dst[tier].k.device)
        to_host = src[tier].k.device.type == "cuda" and dst[tier].k.device.type == "cpu"
        for name in ("k", "v"):
            moved = getattr(src[tier], name)[:, s_idx].to(getattr(dst[tier], name).device, non_blocking=True)
            if to_host:  # a non-blocking copy to the host is only there once the stream has run it
                torch.cuda.current_stream().synchronize()
            getattr(dst[tier], name)[:, d_idx] = moved


def _check_prefill_kernel(kernel: KernelConfig, use_triton: bool, device: torch.device, kv_dtype: torch.dtype) -> None:
    """`kernel.prefill_kernel: fa4` where FA4 can run this engine's prefill attention, else one line saying why."""
    if kernel.prefill_kernel != "fa4":
        return
    why = "needs Triton attention (kernel.attention_backend)" if not use_triton else \
        fa4_unavailable(device, kv_dtype, kernel.qk_clip)
    if why:
        raise ConfigError(f"kernel.prefill_kernel: fa4 {why}")


class ModelRunner:
    def __init__(self, model: LlamaForCausalLM, kv: KVCacheManager, kernel: KernelConfig, kv_dtype: torch.dtype,
                 num_cpu_blocks: tuple[int, ...], device: torch.device, max_num_seqs: int,
                 non_blocking: bool = False) -> None:
        """`non_blocking` (`scheduler.async_scheduling`): a step's inputs copied without waiting for the device."""
        self.model = model
        self.non_blocking = non_blocking
        self.kv = kv
        self.kernel = kernel
        self.device = device
        self.use_triton = kernel.attention_backend == "triton" or (
            kernel.attention_backend == "auto" and device.type == "cuda")
        if self.use_triton and device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            raise ConfigError("kernel.attention_backend: triton needs a CUDA device (or TRITON_INTERPRET=1 on CPU)")
        _check_prefill_kernel(kernel, self.use_triton, device, kv_dtype)
        sizes = [t.block_size for t in kv.tiers]
        self.caches = allocate_caches(model.layout, sizes, [t.num_blocks for t in kv.tiers], kv_dtype, device)
        self.cpu_caches = allocate_caches(model.layout, sizes, num_cpu_blocks, kv_dtype, torch.device("cpu"),
                                          swap=True)
        cuda_triton = device.type == "cuda" and self.use_triton
        self.skinny = pick_skinny(model) if cuda_triton and kernel.skinny_gemm else clear_skinny(model)
        graphs = decode_graphs_on(kernel, len(kv.tiers), cuda_triton)
        self.graphs = self._decode_graphs(max_num_seqs) if graphs else None
        self.piecewise = PiecewiseGraphs(model, kernel.max_cudagraph_capture_size, device) \
            if piecewise_graphs_on(kernel, cuda_triton) else None
        self.paths: Counter[str] = Counter()  # steps run so far by path: "full graph", "piecewise", "eager"

    def _decode_graphs(self, max_num_seqs: int) -> DecodeGraphs:
        if self.device.type != "cuda" or not self.use_triton:
            raise ConfigError("kernel.cuda_graphs: needs a CUDA device and the triton attention backend")
        if len(self.kv.tiers) != 1:
            raise ConfigError("kernel.cuda_graphs: decode graphs support one block-size tier (block_tiers: [])")
        return DecodeGraphs(self.model, self.caches, self.kv, self.kernel, max_num_seqs, self.device)

    @torch.inference_mode()
    def execute(self, out: SchedulerOutput, previous: PreviousTokens | None = None) -> torch.Tensor:
        """Run one step; returns fp32 logits [N, V] for the sequences that sample, in scheduled order.
        `previous`: rows whose input token is the previous step's, still on the device (async scheduling)."""
        _copy_blocks(out.swap_out, self.caches, self.cpu_caches)
        _copy_blocks(out.swap_in, self.cpu_caches, self.caches)
        _copy_blocks(out.block_copies, self.caches, self.caches)
        if not out.scheduled:
            return torch.empty(0, self.model.config.vocab_size, device=self.device)
        if self.graphs is not None and self.graphs.can_run(out.scheduled):
            self.paths["full graph"] += 1
            return self.model.compute_logits(self.graphs.run(out.scheduled, previous))  # every decode row samples
        inputs = build_inputs(out.scheduled, self.kv, self.kernel, self.use_triton, self.device, self.non_blocking)
        if previous is not None:
            feed_previous(inputs.input_ids, previous.tokens, previous.rows, previous.src)
        if self.piecewise is not None and self.piecewise.bucket(inputs.input_ids.shape[0]) is not None:
            self.paths["piecewise"] += 1
            hidden = self.piecewise.run(inputs.input_ids, inputs.positions, inputs.meta, self.caches)  # [bucket, H]
        else:
            self.paths["eager"] += 1
            hidden = self.model(inputs.input_ids, inputs.positions, inputs.meta, self.caches)  # [T, H]
        return self.model.compute_logits(hidden[inputs.sample_rows])  # [N, V]
