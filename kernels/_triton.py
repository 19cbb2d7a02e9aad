"""Guarded access to Triton, and the launchable form of each kernel.

`import kernels` must work where Triton is missing or broken (the torch references need none of it),
so the import is guarded here and every Triton wrapper asks `kernel_for` for its launcher.

Kernels are plain functions in their modules, wrapped by `triton.jit` on first use. On CPU they run
in Triton's interpreter, which Triton switches on when `TRITON_INTERPRET=1` is set before triton is
first imported (Triton decorates its own library functions, `tl.zeros` and the like, at import and
picks compiled or interpreted then). The CPU tests therefore run in a subprocess with that variable.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

try:
    import triton
    import triton.language as tl

    TRITON_IMPORT_ERROR: str | None = None
except Exception as exc:  # why: any failure (missing, broken CUDA libs) must leave the torch path usable
    triton = None
    tl = None
    TRITON_IMPORT_ERROR = f"{type(exc).__name__}: {exc}"
try:  # host-side TMA descriptors (Triton 3.3 on); without them the kernels load tiles by pointers
    from triton.tools.tensor_descriptor import TensorDescriptor
except Exception:  # why: Triton missing or older: the pointer path serves
    TensorDescriptor = None

__all__ = [
    "TRITON_IMPORT_ERROR", "TensorDescriptor", "interpreting", "kernel_for", "next_power_of_2", "tl", "triton",
    "triton_available",
]


def triton_available() -> bool:
    return triton is not None


def next_power_of_2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def interpreting() -> bool:
    """Whether Triton was imported in interpreter mode (so its kernels run on CPU tensors)."""
    if triton is None:
        return False
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(tl.zeros, InterpretedFunction)


@functools.cache
def _jit(fn: Callable[..., None]) -> Any:
    """`fn.do_not_specialize` (parameter names), where a kernel sets it: integer arguments that change from
    call to call, so Triton compiles one form for every value instead of one per divisibility class."""
    return triton.jit(fn, do_not_specialize=getattr(fn, "do_not_specialize", None))


def kernel_for(fn: Callable[..., None], device: torch.device) -> Any:
    """The launchable form of kernel `fn` for tensors on `device` (`kernel[grid](...)`)."""
    if triton is None:
        raise RuntimeError(f"Triton is not usable here ({TRITON_IMPORT_ERROR}); use the torch path")
    if device.type == "cpu" and not interpreting():
        raise RuntimeError(
            "Triton kernels run on CPU only in Triton's interpreter: set TRITON_INTERPRET=1 "
            "before triton is first imported, or use the torch path"
        )
    if device.type not in ("cuda", "cpu"):
        raise ValueError(f"Triton kernels run on cuda (compiled) or cpu (interpreted), not {device}")
    return _jit(fn)
