"""`vllm serve` as of one vLLM release, and pagetune's configs as its `--config` files.

    serve    its engine options (with source lines) and its defaults per device
    export   the runtime config written as vllm.yaml (`vllm_yaml`), the knobs it cannot express
    meta     the vLLM-only engine args a config carries (`EngineConfig.metadata`), as `--config` keys
    trial    a trial's file on executor=vllm (`trial_file`), vLLM's own defaults as the baseline

Every fact names the "path:line" of VLLM_VERSION's source it was read at (docs/VLLM.md has the table).
"""

from __future__ import annotations

from tuner.vllm.export import MAPPED, VllmExport, flatten, vllm_yaml
from tuner.vllm.meta import VLLM_META, is_vllm_defaults, serve_keys, vllm_args, with_vllm_args
from tuner.vllm.serve import OPTIONS, VLLM_VERSION, DeviceClass, OptionKind, VllmOption, device_class, serve_defaults
from tuner.vllm.trial import as_vllm_defaults, option_names, trial_file

__all__ = ["MAPPED", "OPTIONS", "VLLM_META", "VLLM_VERSION", "DeviceClass", "OptionKind", "VllmExport", "VllmOption",
           "as_vllm_defaults", "device_class", "flatten", "is_vllm_defaults", "option_names", "serve_defaults",
           "serve_keys", "trial_file", "vllm_args", "vllm_yaml", "with_vllm_args"]
