"""A trial on vLLM (executor=vllm): its `vllm serve --config` file, the baseline marked as vLLM's own defaults, and
the vLLM options a knob path writes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runtime import EngineConfig
from tuner.vllm.export import MAPPED, vllm_yaml
from tuner.vllm.meta import VLLM_META, serve_keys, vllm_args, with_vllm_args

__all__ = ["as_vllm_defaults", "option_names", "trial_file"]

def as_vllm_defaults(config: EngineConfig, fixed: Mapping[str, Any]) -> EngineConfig:
    """`config` marked as vLLM's defaults, with `fixed` (dotted knob paths -> value, the frozen knobs) as the only
    engine args written for it: `runtime.*` ones through the export's option names, `vllm.*` ones as they are."""
    args = {}
    for path, value in fixed.items():
        section, key = path.split(".", 1)
        if section == "vllm":
            args[key] = value
        elif key == "kernel.cuda_graphs" and value is not None:
            args["enforce_eager"] = not value
        elif key in MAPPED and key != "model.name":
            args[MAPPED[key].replace("-", "_")] = value
    meta = with_vllm_args({**(config.metadata or {}), VLLM_META: {"defaults": True}}, args)
    return EngineConfig.from_mapping({**config.to_dict(), "metadata": meta})


def trial_file(config: EngineConfig, *, model: str, deploy: Mapping[str, Any], only_args: bool = False
               ) -> dict[str, Any]:
    """What `vllm serve --config FILE` reads for a trial: the export of `config` (vLLM's defaults, or `only_args`:
    only the model), its vLLM-only args, then `deploy` (executor.vllm.args, the same for every trial and the
    baseline)."""
    if only_args:
        return {"model": model, **serve_keys(vllm_args(config)), **serve_keys(deploy)}
    return {**vllm_yaml(config, model_path=model).args, **serve_keys(deploy)}


def option_names(path: str) -> tuple[str, ...]:
    """The vLLM options (dests) a knob path writes: `runtime.scheduler.max_num_seqs` -> (max_num_seqs,);
    `vllm.async_scheduling` -> (async_scheduling,); () for a runtime field with no vLLM equivalent."""
    section, key = path.split(".", 1)
    if section == "vllm":
        return (key,)
    return (MAPPED[key].replace("-", "_"),) if section == "runtime" and key in MAPPED else ()
