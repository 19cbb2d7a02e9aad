"""Which prefill chunks take which path, as index tensors: the same for every layer of a step.

`prefill_attention` sends chunks of at least `flash_min_len` query tokens to the Triton flash kernel and
shorter ones to SDPA over their gathered K/V. Choosing, and laying out the short chunks as one padded
batch, needs the chunk and context lengths on the host and a handful of index tensors on the device.
Built inside each layer that is a device sync and several host-to-device copies per layer (each copy
from pageable memory waits for the device): measured on an H200, a Llama-3-8B step with one short chunk
took 3-4x its predicted time. `plan_prefill` builds it once a step from the host lists the input
builder already has (`runtime.inputs`), its index tensors copied without waiting for the device;
`prefill_attention` builds it per call when given none. The threshold of 1 sends every chunk to flash, the
faster path at every chunk length measured on an H200. The plan also carries the flash launch's tuning, which
depends on the chunks' context lengths and the cache's page size (`default_tuning`): only the host has the lengths
without a device sync.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from kernels.paged_prefill import PrefillTuning, default_tuning

__all__ = ["FlashChunks", "PrefillPlan", "ShortChunks", "plan_prefill"]


class FlashChunks(NamedTuple):
    """The chunks for the flash kernel, as a sub-batch of their own."""

    rows: torch.Tensor  # int64 [R]: their query rows, in order
    starts: torch.Tensor  # int32 [F + 1]: their offsets within `rows`
    seqs: torch.Tensor  # int64 [F]: their sequences (rows of the block tables and context lengths)


class ShortChunks(NamedTuple):
    """The chunks for SDPA, padded into one batch of `max_q` query rows over `max_ctx` positions."""

    rows: torch.Tensor  # int64 [R]: their query rows, in order
    seqs: torch.Tensor  # int64 [S]
    padded_rows: torch.Tensor  # int64 [S, max_q]: padding rows repeat the chunk's last row (finite, dropped)
    visible: torch.Tensor  # bool [S, max_q, max_ctx]: causal mask over each sequence's positions
    keep: torch.Tensor  # int64 [R]: the rows of the flattened padded output that are real
    max_ctx: int


class PrefillPlan(NamedTuple):
    all_flash: bool  # every chunk takes the flash kernel: the whole batch in one launch
    flash: FlashChunks | None
    short: ShortChunks | None
    tuning: PrefillTuning  # the flash launch's, from the flash chunks' lengths (unused when there are none)
    max_q: int = 0  # the longest chunk and context of the batch (host integers: FA4's launch bounds)
    max_ctx: int = 0


def plan_prefill(query_start_loc: list[int], context_lens: list[int], flash_min_len: int,
                 device: torch.device, page_tokens: int = 0) -> PrefillPlan:
    """The paths of a prefill batch from its offsets [B + 1] and context lengths [B], on the host; `page_tokens`:
    the cache's page size (the flash launch's rule depends on it; 0: not known)."""
    q_lens = np.diff(np.asarray(query_start_loc, dtype=np.int64))
    ctx = np.asarray(context_lens, dtype=np.int64)
    flash = np.flatnonzero(q_lens >= flash_min_len)
    short = np.flatnonzero((q_lens > 0) & (q_lens < flash_min_len))
    tuning = default_tuning(int(q_lens[flash].sum()), len(flash), int(ctx[flash].sum()), page_tokens)
    bounds = (int(q_lens.max(initial=0)), int(ctx.max(initial=0)))
    if len(flash) == len(q_lens):
        return PrefillPlan(True, None, None, tuning, *bounds)
    starts = np.asarray(query_start_loc[:-1], dtype=np.int64)
    return PrefillPlan(False, _flash(flash, starts, q_lens, device) if len(flash) else None,
                       _short(short, starts, q_lens, ctx, device) if len(short) else None, tuning, *bounds)


def _rows(seqs: np.ndarray, starts: np.ndarray, q_lens: np.ndarray) -> np.ndarray:
    return np.concatenate([np.arange(starts[s], starts[s] + q_lens[s]) for s in seqs])


def _device(a: np.ndarray, device: torch.device) -> torch.Tensor:
    """On CUDA through pinned memory, without waiting for the device: a copy from pageable memory would wait
    for the stream's earlier work, which async scheduling runs ahead of (the caching host allocator keeps the
    pinned buffer until its copy has run)."""
    host = torch.from_numpy(np.ascontiguousarray(a))
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def _flash(seqs: np.ndarray, starts: np.ndarray, q_lens: np.ndarray, device: torch.device) -> FlashChunks:
    offsets = np.concatenate([[0], np.cumsum(q_lens[seqs])]).astype(np.int32)
    return FlashChunks(_device(_rows(seqs, starts, q_lens), device), _device(offsets, device), _device(seqs, device))


def _short(seqs: np.ndarray, starts: np.ndarray, q_lens: np.ndarray, ctx: np.ndarray,
           device: torch.device) -> ShortChunks:
    lens, ctx = q_lens[seqs], ctx[seqs]
    max_q, max_ctx = int(lens.max()), int(ctx.max())
    row = np.minimum(np.arange(max_q)[None, :], lens[:, None] - 1)  # [S, max_q]
    q_pos = ctx[:, None] - lens[:, None] + row  # each padded row's position in its sequence
    visible = np.arange(max_ctx)[None, None, :] <= q_pos[:, :, None]  # [S, max_q, max_ctx]
    keep = np.flatnonzero(np.arange(max_q)[None, :] < lens[:, None])
    return ShortChunks(_device(_rows(seqs, starts, q_lens), device), _device(seqs, device),
                       _device(starts[seqs][:, None] + row, device), _device(visible, device),
                       _device(keep, device), max_ctx)
