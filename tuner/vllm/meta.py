"""The vLLM-only side of a config: search=vllm's `vllm.*` engine args (and executor=vllm's baseline mark, vLLM's
own defaults) kept in `EngineConfig.metadata` under VLLM_META, and engine args as `vllm serve --config` keys."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runtime import EngineConfig
from tuner.rounding import rounded

__all__ = ["VLLM_META", "is_vllm_defaults", "serve_keys", "vllm_args", "with_vllm_args"]

VLLM_META = "vllm"  # EngineConfig.metadata key: {"args": {dest: value}} (vLLM-only args), "defaults": true


def vllm_args(config: EngineConfig) -> dict[str, Any]:
    """The vLLM-only engine args a config carries (search=vllm's `vllm.NAME` knobs), by dest."""
    return dict(((config.metadata or {}).get(VLLM_META) or {}).get("args") or {})


def with_vllm_args(metadata: Mapping[str, Any] | None, args: Mapping[str, Any]) -> dict[str, Any]:
    """`metadata` with `args` added to its vLLM-only engine args."""
    entry = dict((metadata or {}).get(VLLM_META) or {})
    entry["args"] = {**(entry.get("args") or {}), **args}
    return {**(metadata or {}), VLLM_META: entry}


def is_vllm_defaults(config: EngineConfig) -> bool:
    """Whether the config is vLLM's own defaults (executor=vllm's baseline: no engine flag but the fixed ones)."""
    return bool(((config.metadata or {}).get(VLLM_META) or {}).get("defaults"))


def serve_keys(args: Mapping[str, Any]) -> dict[str, Any]:
    """Engine args by dest (`async_scheduling`) as `vllm serve --config` keys, by the export's rules: dashes, a
    false flag as `no-KEY: true` (a loader drops `false`), a null left out (vLLM's default)."""
    out: dict[str, Any] = {}
    for dest, value in args.items():
        key = dest.replace("_", "-")
        if value is False:
            out[f"no-{key}"] = True
        elif value is not None:
            out[key] = rounded(value, 4)
    return out
