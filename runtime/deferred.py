"""Sampled tokens left on the device (`scheduler.async_scheduling`): what lets step N+1 start before the host
knows step N's tokens.

    step N    forward -> sample -> tokens [M] on the device ──copy (non-blocking)──> pinned host [M] -> event
    step N+1  inputs built on the host, a decode row's token left unknown ... ids[rows] = tokens[src] (device)
    host      event.synchronize(), then tokens.tolist(): step N's stops seen while step N+1 runs

Nothing here waits for the device except `DeferredTokens.tolist`, which waits for its own step's event only.
On a CPU every copy is immediate and there is no event.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch


def host_to_device(values: Sequence[int] | np.ndarray, dtype: np.dtype, device: torch.device) -> torch.Tensor:
    """Host values as a device tensor without waiting for the device: on CUDA through pinned memory and a
    non-blocking copy (a copy from pageable memory would wait for the stream's earlier work)."""
    host = torch.from_numpy(np.asarray(values, dtype=dtype))
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)  # the caching host allocator keeps it until copied


class DeferredTokens:
    """One token per sampled sequence, on the device, and its copy on its way to the host."""

    def __init__(self, tokens: torch.Tensor) -> None:
        self.device = tokens  # [M] int64: the next step's inputs read it on the device
        if tokens.device.type == "cuda":
            self._host = torch.empty(tokens.shape, dtype=tokens.dtype, pin_memory=True)
            self._host.copy_(tokens, non_blocking=True)
            self._event: torch.cuda.Event | None = torch.cuda.Event()
            self._event.record()
        else:
            self._host, self._event = tokens, None

    def tolist(self) -> list[int]:
        """The tokens on the host: waits for this step's sampling only (its event), nothing queued after it."""
        if self._event is not None:
            self._event.synchronize()
        return self._host.tolist()


def feed_previous(input_ids: torch.Tensor, tokens: torch.Tensor, rows: Sequence[int], src: Sequence[int]) -> None:
    """input_ids[rows[i]] = tokens[src[i]], on the device: the rows whose token the host does not know yet."""
    if not rows:
        return
    device = input_ids.device
    input_ids[host_to_device(rows, np.int64, device)] = tokens[host_to_device(src, np.int64, device)]
