"""A tensor-parallel group's collectives, the same code on CPU (gloo) and on GPUs (NCCL).

Each engine builds its own process group from a `TCPStore` that rank 0 hosts, with no `init_process_group`
and so no process-wide default group: a process can build engine after engine (the tuner's worker, tests),
each with its ranks. The backend follows the device: NCCL on CUDA, gloo on CPU. Every collective has a
timeout (`COLLECTIVE_TIMEOUT_S`), so a rank that stops answering fails a step instead of hanging it.
"""

from __future__ import annotations

import datetime
import os

import torch
from torch.distributed import PrefixStore, TCPStore

__all__ = ["COLLECTIVE_TIMEOUT_S", "NVLS_OFF", "RankGroup", "host_store", "join_store", "rank_device",
           "turn_nvls_off"]

COLLECTIVE_TIMEOUT_S = 120.0  # a collective (or the rendezvous) that waits longer fails: a rank is gone or hung
HOST = "127.0.0.1"  # every rank runs on this machine
# NVLink multicast (NVLS) off in every process the runtime starts: it hangs or fails on the lent machines
# (KINDS.md), and vLLM's own runs set the same three.
NVLS_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def turn_nvls_off() -> None:
    """Set `NVLS_OFF` in this process's environment (inherited by the ranks it starts), before NCCL loads."""
    os.environ.update(NVLS_OFF)


def _timeout() -> datetime.timedelta:
    return datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S)


def host_store(size: int) -> TCPStore:
    """Rank 0's rendezvous store on a free port (`store.port`); returns without waiting for the other ranks."""
    return TCPStore(HOST, 0, size, True, timeout=_timeout(), wait_for_workers=False)


def join_store(port: int, size: int) -> TCPStore:
    return TCPStore(HOST, port, size, False, timeout=_timeout())


def rank_device(device: torch.device, rank: int) -> torch.device:
    """Rank r's device: the CPU for every rank, or the r-th GPU from the configured one (cuda:N -> cuda:N+r)."""
    if device.type != "cuda":
        return device
    return torch.device("cuda", (device.index or 0) + rank)


class RankGroup:
    """The collectives the sharded model calls (`runtime.model.parallel`): all-reduce and all-gather."""

    def __init__(self, store: TCPStore, rank: int, size: int, device: torch.device) -> None:
        self.rank, self.size, self.device = rank, size, device
        prefixed = PrefixStore("tp", store)
        if device.type == "cuda":
            torch.cuda.set_device(device)
            options = torch.distributed.ProcessGroupNCCL.Options()
            options._timeout = _timeout()
            self.pg = torch.distributed.ProcessGroupNCCL(prefixed, rank, size, options)
        else:
            self.pg = torch.distributed.ProcessGroupGloo(prefixed, rank, size, _timeout())

    @property
    def backend(self) -> str:
        return "nccl" if self.device.type == "cuda" else "gloo"

    def all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        """Sum `t` over the ranks, in place (every rank gets the sum)."""
        self.pg.allreduce([t]).wait()
        return t

    def all_gather(self, t: torch.Tensor) -> torch.Tensor:
        """Every rank's `t` [..., n] side by side along the last dimension: [..., size * n], rank order."""
        parts = [torch.empty_like(t) for _ in range(self.size)]
        self.pg.allgather([parts], [t.contiguous()]).wait()
        return torch.cat(parts, dim=-1)
