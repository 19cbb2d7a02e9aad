"""The baseline every candidate is measured against.

`baseline=vllm` (the default): the composed runtime config with `vllm serve`'s defaults on this
device for the knobs pagetune shares with vLLM (tuner.vllm names the vLLM version and the
source lines): block size, gpu_memory_utilization, prefix caching, chunked prefill, CUDA graphs
(vLLM captures wherever the platform can: the runtime's `cuda_graphs: null`), max_num_seqs and
max_num_batched_tokens for the device's memory class. `baseline=runtime`: the composed config as it
is. Either way a frozen knob (`freeze: VALUE`) holds for the baseline too: it is a constraint of the
deployment, not a choice.

`executor=vllm` with `baseline=vllm`: vLLM itself picks, so the baseline runs with no engine flag at all but the
frozen knobs' (`tuner.vllm.as_vllm_defaults`); its knob values above stay pagetune's reading of those defaults.
"""

from __future__ import annotations

from typing import Any

from runtime import EngineConfig
from tuner.config import AppConfig, BaselineName
from tuner.measure.job import Hardware
from tuner.search.space import KnobMode, SearchSpace, set_path
from tuner.vllm import as_vllm_defaults, serve_defaults

__all__ = ["baseline_config"]

CPU_PLANNED_GB = 1.0  # on CPU: the row of vLLM's smallest device class (its batch defaults), whatever the RAM


def baseline_config(app: AppConfig, hardware: Hardware, space: SearchSpace) -> tuple[EngineConfig, str]:
    """The baseline config, and where its values come from (one line for the report)."""
    config, source = app.runtime, "the composed runtime config (baseline=runtime)"
    if app.baseline is BaselineName.vllm:
        memory = hardware.memory_gb or app.runtime.cache.device_memory_gb or CPU_PLANNED_GB
        defaults = serve_defaults(memory, hardware.name)
        source = str(defaults.pop("SOURCE"))
        defaults["kernel.cuda_graphs"] = None  # vLLM's default: graphs wherever they run, i.e. ours when null
        config = _with(app.runtime, defaults)
        if app.executor.kind == "vllm":
            fixed = {k.path: k.fixed for k in space.knobs if k.mode is KnobMode.FIXED}
            config = as_vllm_defaults(config, fixed)
            source = f"vLLM's own defaults, no engine flag ({hardware.versions})"
    return space.apply(config, space.with_fixed(space.values_of(config))), source


def _with(config: EngineConfig, dotted: dict[str, Any]) -> EngineConfig:
    data = config.to_dict()
    for key, value in dotted.items():
        set_path(data, key, value)
    return EngineConfig.from_mapping(data)
