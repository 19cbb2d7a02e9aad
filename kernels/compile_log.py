"""Which Triton kernels compile while a block of code runs: what a warm-up missed.

    with CompileLog() as log:
        engine.step()
    log.compiles  # [(kernel name, its constexprs), ...] in the order they compiled

Triton compiles a kernel once per specialisation (its constexprs, and integer arguments equal to 1 or
divisible by 16); a compile in the middle of serving stalls that step for a fraction of a second. The log
hangs on Triton's `knobs.runtime.jit_post_compile_hook` (Triton >= 3.4) and chains to any hook already set;
where Triton lacks the knob, `available` is False and nothing is recorded.
"""

from __future__ import annotations

from typing import Any

from kernels._triton import triton

__all__ = ["CompileLog"]


def _runtime_knobs() -> Any | None:
    knobs = getattr(triton, "knobs", None) if triton is not None else None
    runtime = getattr(knobs, "runtime", None)
    return runtime if runtime is not None and hasattr(runtime, "jit_post_compile_hook") else None


class CompileLog:
    def __init__(self) -> None:
        self.compiles: list[tuple[str, dict[str, Any]]] = []
        self._runtime = _runtime_knobs()
        self._previous = None

    @property
    def available(self) -> bool:
        return self._runtime is not None

    def _hook(self, *, fn: Any, compile: dict[str, Any], **kwargs: Any) -> Any:
        constants = {str(k[0] if isinstance(k, tuple) else k): v for k, v in compile.get("constants", {}).items()}
        self.compiles.append((fn.name, constants))
        return self._previous(fn=fn, compile=compile, **kwargs) if self._previous is not None else None

    def __enter__(self) -> CompileLog:
        if self._runtime is not None:
            self._previous = self._runtime.jit_post_compile_hook
            self._runtime.jit_post_compile_hook = self._hook
        return self

    def __exit__(self, *exc: object) -> None:
        if self._runtime is not None:
            self._runtime.jit_post_compile_hook = self._previous

    def summary(self) -> dict[str, int]:
        """Compiles per kernel name."""
        out: dict[str, int] = {}
        for name, _ in self.compiles:
            out[name] = out.get(name, 0) + 1
        return out
