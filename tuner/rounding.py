"""Numbers as people read them in params, tags and files: floats to a few significant digits, inside lists and
mappings too (MLflow's params, the console, vllm.yaml)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["rounded"]


def rounded(value: Any, digits: int = 6) -> Any:
    """Floats to `digits` significant digits, inside lists and mappings too: a sampled 2.456519136895919 or a
    stepped 0.7000000000000001 reads 2.45652 and 0.7 (a knob has no meaning past that); inf and nan as they are."""
    if isinstance(value, float) and math.isfinite(value):
        return float(f"{value:.{digits}g}")
    if isinstance(value, list | tuple):
        return [rounded(v, digits) for v in value]
    if isinstance(value, Mapping):
        return {k: rounded(v, digits) for k, v in value.items()}
    return value
