"""Flat model inputs and attention metadata for one step, built from the scheduler's decision."""

from __future__ import annotations

from itertools import groupby
from typing import NamedTuple

import numpy as np
import torch

from kernels import plan_prefill
from runtime.attention import AttentionMetadata, DecodeBatch, PrefillBatch, TierBatch
from runtime.config import KernelConfig
from runtime.deferred import host_to_device
from runtime.kv.manager import KVCacheManager
from runtime.limits import padded_tokens
from runtime.scheduler import ScheduledSeq


class StepInputs(NamedTuple):
    input_ids: torch.Tensor  # [T_padded] int64
    positions: torch.Tensor  # [T_padded] int64
    meta: AttentionMetadata
    sample_rows: torch.Tensor  # [N] int64: row of the last token of each sequence that samples


def _tensor(values: list[int], dtype: np.dtype, device: torch.device, non_blocking: bool = False) -> torch.Tensor:
    """A host list as a device tensor (through numpy: several times faster than torch.tensor on lists);
    `non_blocking`: through pinned memory, without waiting for the device (`scheduler.async_scheduling`)."""
    if non_blocking:
        return host_to_device(values, dtype, device)
    return torch.from_numpy(np.asarray(values, dtype=dtype)).to(device)


def slot_of(table: list[int], position: int, block_size: int) -> int:
    """The cache slot of a token: block_id * block_size + offset (see kernels.kv_write)."""
    return table[position // block_size] * block_size + position % block_size


def _tables(tables: list[list[int]], device: torch.device, non_blocking: bool) -> torch.Tensor:
    padded = np.zeros((len(tables), max(len(t) for t in tables)), dtype=np.int32)  # [B, max_blocks]
    for row, table in zip(padded, tables):
        row[: len(table)] = table
    return host_to_device(padded, np.int32, device) if non_blocking else torch.from_numpy(padded).to(device)


def _part(items: list[ScheduledSeq], is_decode: bool, kv: KVCacheManager, first_row: int, device: torch.device,
          flash_min_len: int | None, non_blocking: bool):
    """Decode or prefill part of one tier: (batch, token ids, positions, slots). `flash_min_len`: the Triton
    path's, to plan the prefill chunks' paths once for every layer (None: the torch reference, no plan)."""
    tier = kv.tiers[items[0].seq.tier]
    bs = tier.block_size
    ids: list[int] = []
    pos: list[int] = []
    slots: list[int] = []
    tables, ctx, qsl = [], [], [0]
    for it in items:
        table = kv.block_table(it.seq)
        span = range(it.start, it.start + it.num_new_tokens)
        ids.extend(it.seq.token_ids[it.start : it.start + it.num_new_tokens])
        pos.extend(span)
        if is_decode:
            slots.append(slot_of(table, it.start, bs))
        else:  # slot_of over a chunk, vectorised: chunks run to thousands of tokens
            positions = np.arange(span.start, span.stop)
            slots.extend((np.asarray(table, dtype=np.int64)[positions // bs] * bs + positions % bs).tolist())
        tables.append(table)
        ctx.append(it.start + it.num_new_tokens)
        qsl.append(qsl[-1] + it.num_new_tokens)
    rows = slice(first_row, first_row + len(ids))
    block_tables = _tables(tables, device, non_blocking)
    context_lens = _tensor(ctx, np.int32, device, non_blocking)
    if is_decode:
        batch = DecodeBatch(rows, block_tables, context_lens, tier.max_context)
    else:
        plan = None if flash_min_len is None else plan_prefill(qsl, ctx, flash_min_len, device, bs)
        batch = PrefillBatch(rows, block_tables, _tensor(qsl, np.int32, device, non_blocking), context_lens, plan)
    return batch, ids, pos, slots


def build_inputs(scheduled: tuple[ScheduledSeq, ...], kv: KVCacheManager, kernel: KernelConfig,
                 use_triton: bool, device: torch.device, non_blocking: bool = False) -> StepInputs:
    """`non_blocking`: every copy to the device from pinned memory, none waiting for the device
    (`scheduler.async_scheduling`; the prefill plan of `flash_min_len` > 1 still copies from pageable memory)."""
    ids: list[int] = []
    pos: list[int] = []
    tiers: list[TierBatch] = []
    for tier, group in groupby(scheduled, key=lambda s: s.seq.tier):
        start = len(ids)
        parts: dict[bool, object] = {}
        slots: list[int] = []
        for is_decode, items in groupby(group, key=lambda s: s.num_new_tokens == 1):
            batch, p_ids, p_pos, p_slots = _part(list(items), is_decode, kv, len(ids), device,
                                                 kernel.flash_min_len if use_triton else None, non_blocking)
            parts[is_decode] = batch
            ids += p_ids
            pos += p_pos
            slots += p_slots
        slot_mapping = _tensor(slots, np.int64, device, non_blocking)
        tiers.append(TierBatch(tier, slice(start, len(ids)), slot_mapping, parts.get(True), parts.get(False)))
    rows = _sample_rows(scheduled)
    pad = padded_tokens(len(ids), kernel.pad_multiple) - len(ids)  # GEMM-friendly token count; pad rows are in no tier
    meta = AttentionMetadata.of(tuple(tiers), use_triton, kernel)
    return StepInputs(
        input_ids=_tensor(ids + [0] * pad, np.int64, device, non_blocking),
        positions=_tensor(pos + [0] * pad, np.int64, device, non_blocking),
        meta=meta,
        sample_rows=_tensor(rows, np.int64, device, non_blocking),
    )


def _sample_rows(scheduled: tuple[ScheduledSeq, ...]) -> list[int]:
    rows, end = [], 0
    for it in scheduled:
        end += it.num_new_tokens
        if it.sample:
            rows.append(end - 1)
    return rows
