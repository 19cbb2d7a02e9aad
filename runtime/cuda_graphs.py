"""CUDA graphs for decode steps: one captured forward per padded batch size (`cuda_graphs: true`).

A pure-decode step of a single-tier engine (every scheduled sequence computes one token) replays
the graph of the smallest bucket that holds its batch, after copying its inputs into the graph's
static tensors. Padding rows write their K/V to a slot one past the end of the pool, which the
Triton KV write skips, and attend to one position of block 0 (read only, result dropped).

    buckets: 1 2 4 8 16 24 32 ... max_num_seqs (multiples of 8)    a batch of 13 replays bucket 16
"""

from __future__ import annotations

import torch

from runtime.attention import AttentionMetadata, DecodeBatch, KVCache, TierBatch
from runtime.backend import PreviousTokens
from runtime.config import KernelConfig
from runtime.deferred import feed_previous
from runtime.inputs import slot_of
from runtime.kv.manager import KVCacheManager
from runtime.limits import graph_bucket, graph_buckets
from runtime.model.llama import LlamaForCausalLM
from runtime.scheduler import ScheduledSeq


class DecodeGraphs:
    def __init__(self, model: LlamaForCausalLM, caches: list[KVCache], kv: KVCacheManager, kernel: KernelConfig,
                 max_batch: int, device: torch.device) -> None:
        assert len(kv.tiers) == 1, "decode graphs need a single tier"
        self.model, self.caches, self.kv = model, caches, kv
        tier = kv.tiers[0]
        self.block_size = tier.block_size
        self.width = tier.table_blocks  # block-table columns: a max_model_len request
        self.max_context = tier.max_context
        self.pad_slot = tier.num_blocks * tier.block_size  # past the end: the Triton KV write skips it
        self.sizes = graph_buckets(max_batch)
        top = self.sizes[-1]
        self.ids = torch.zeros(top, dtype=torch.int64, device=device)
        self.positions = torch.zeros(top, dtype=torch.int64, device=device)
        self.slots = torch.full((top,), self.pad_slot, dtype=torch.int64, device=device)
        self.tables = torch.zeros(top, self.width, dtype=torch.int32, device=device)
        self.context = torch.ones(top, dtype=torch.int32, device=device)
        self.staging = (_Staging(top, self.width), _Staging(top, self.width))  # used in turn, step after step
        self._turn = 0
        self.kernel = kernel
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.hidden: dict[int, torch.Tensor] = {}
        self._capture_all()

    def _meta(self, b: int) -> AttentionMetadata:
        rows = slice(0, b)
        decode = DecodeBatch(rows, self.tables[:b], self.context[:b], self.max_context)
        tier = TierBatch(0, rows, self.slots[:b], decode, None)
        return AttentionMetadata.of((tier,), True, self.kernel)

    def _forward(self, b: int) -> torch.Tensor:
        return self.model(self.ids[:b], self.positions[:b], self._meta(b), self.caches)

    @torch.inference_mode()
    def _capture_all(self) -> None:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm up: compiles the Triton kernels outside any capture
            for b in self.sizes:
                self._forward(b)
        torch.cuda.current_stream().wait_stream(stream)
        pool = torch.cuda.graph_pool_handle()
        for b in reversed(self.sizes):  # largest first, so smaller graphs reuse its memory pool
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self.hidden[b] = self._forward(b)
            self.graphs[b] = graph
        torch.cuda.synchronize()

    def can_run(self, scheduled: tuple[ScheduledSeq, ...]) -> bool:
        return graph_bucket(self.sizes, scheduled) is not None

    @torch.inference_mode()
    def run(self, scheduled: tuple[ScheduledSeq, ...], previous: PreviousTokens | None = None) -> torch.Tensor:
        """Hidden states [len(scheduled), H] of this decode step, from the replayed graph. `previous`: the rows
        whose token is still on the device (`scheduler.async_scheduling`), scattered into the static ids."""
        n = len(scheduled)
        b = graph_bucket(self.sizes, scheduled)
        staged = self.staging[self._turn]
        self._turn ^= 1
        staged.copied.synchronize()  # its copies of two graph steps ago: long done
        self._stage(staged, scheduled, b)
        self.ids[:b].copy_(staged.ids[0, :b], non_blocking=True)
        self.positions[:b].copy_(staged.ids[1, :b], non_blocking=True)
        self.slots[:b].copy_(staged.ids[2, :b], non_blocking=True)
        self.context[:b].copy_(staged.ctx[:b], non_blocking=True)
        self.tables[:b].copy_(staged.tables[:b], non_blocking=True)
        staged.copied.record()
        if previous is not None:
            feed_previous(self.ids, previous.tokens, previous.rows, previous.src)
        self.graphs[b].replay()
        return self.hidden[b][:n]

    def _stage(self, staged: _Staging, scheduled: tuple[ScheduledSeq, ...], b: int) -> None:
        """Fill one set of pinned host buffers (its last copies to the device done): rows past len(scheduled)
        up to b are padding. Two sets in turn: under async scheduling the host stages a step while the
        device may not have copied the previous one's inputs yet."""
        bs, n, tables = self.block_size, len(scheduled), staged.host_tables
        ids, pos, slots = [], [], []
        for i, it in enumerate(scheduled):
            table = self.kv.block_table(it.seq)
            ids.append(it.seq.token_ids[it.start])
            pos.append(it.start)
            slots.append(slot_of(table, it.start, bs))
            tables[i, : len(table)] = table
            tables[i, len(table) :] = 0
        host, host_ctx = staged.host, staged.host_ctx
        host[:, :n] = ids, pos, slots
        host_ctx[:n] = host[1, :n] + 1
        host[:, n:b] = ((0,), (0,), (self.pad_slot,))
        host_ctx[n:b], tables[n:b] = 1, 0


class _Staging:
    """Pinned host buffers a step's inputs are staged in, and their numpy views."""

    def __init__(self, top: int, width: int) -> None:
        self.ids = torch.zeros(3, top, dtype=torch.int64, pin_memory=True)  # ids, positions, slots
        self.ctx = torch.ones(top, dtype=torch.int32, pin_memory=True)
        self.tables = torch.zeros(top, width, dtype=torch.int32, pin_memory=True)
        self.host, self.host_ctx, self.host_tables = self.ids.numpy(), self.ctx.numpy(), self.tables.numpy()
        self.copied = torch.cuda.Event()  # recorded after the copies out of these buffers; a new one is done
