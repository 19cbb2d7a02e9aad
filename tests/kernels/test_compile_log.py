"""`CompileLog` hangs on Triton's post-compile hook and gives back the one that was there."""

from __future__ import annotations

import pytest

from kernels._triton import triton
from kernels.compile_log import CompileLog

knobs = getattr(triton, "knobs", None)
pytestmark = pytest.mark.skipif(knobs is None, reason="Triton without knobs")


class _Fn:
    name = "_some_kernel"


def test_records_each_compile_and_chains_to_the_previous_hook():
    seen = []
    previous = knobs.runtime.jit_post_compile_hook
    knobs.runtime.jit_post_compile_hook = lambda **kw: seen.append(kw["fn"].name)
    try:
        with CompileLog() as log:
            knobs.runtime.jit_post_compile_hook(fn=_Fn(), compile={"constants": {("SPLIT",): True}}, key=None)
            knobs.runtime.jit_post_compile_hook(fn=_Fn(), compile={"constants": {}}, key=None)
        assert log.compiles == [("_some_kernel", {"SPLIT": True}), ("_some_kernel", {})]
        assert log.summary() == {"_some_kernel": 2}
        assert seen == ["_some_kernel", "_some_kernel"]
        knobs.runtime.jit_post_compile_hook(fn=_Fn(), compile={}, key=None)  # restored: only the old hook
        assert len(log.compiles) == 2 and len(seen) == 3
    finally:
        knobs.runtime.jit_post_compile_hook = previous
