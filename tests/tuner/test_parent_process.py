"""The tuner's parent process plans without torch, and imports the runtime's public surface only."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

TUNER = Path(__file__).resolve().parents[2] / "tuner"


def test_the_parent_process_never_imports_torch():
    code = ("import sys, tuner.app, tuner.results.summary, tuner.executors.supervisor\n"
            "from runtime import EngineConfig, engine_limits, model_info\n"
            "engine_limits(EngineConfig(), model_info('llama-3-8b'))\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'triton')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_tuner_imports_nothing_but_the_runtime_package():
    """`from runtime import ...` only: the runtime's __init__ is the surface the tuner is allowed to use."""
    offenders = [f"{path.relative_to(TUNER.parent)}:{n}: {line.strip()}"
                 for path in TUNER.rglob("*.py")
                 for n, line in enumerate(path.read_text().splitlines(), 1)
                 if re.match(r"\s*(from runtime\.|import runtime\b)", line)]
    assert offenders == []
