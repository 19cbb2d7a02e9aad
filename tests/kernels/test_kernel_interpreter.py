"""Runs the Triton kernels on CPU, under Triton's interpreter, in a subprocess.

Triton picks compiled or interpreted mode when it is first imported (TRITON_INTERPRET), and this
pytest process may already have imported it in compiled mode for other tests, so the interpreter
cases (interp_*.py) run in a fresh process with TRITON_INTERPRET=1 and no visible GPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernels import triton_available

HERE = Path(__file__).parent


CASES = [
    "interp_kv_write.py", "interp_paged_decode.py", "interp_paged_prefill.py", "interp_dispatch.py", "interp_layers.py",
    "interp_skinny.py",
]


@pytest.mark.skipif(not triton_available(), reason="triton is not importable")
def test_triton_kernels_match_references_under_interpreter() -> None:
    # One process for all case files: its start (torch, triton) costs more than most cases.
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": "", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *(str(HERE / c) for c in CASES)]
    result = subprocess.run(cmd, cwd=HERE.parent.parent, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-3000:]
