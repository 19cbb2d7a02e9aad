"""`python -m tuner.vllm_check VLLM_YAML +traffic=PATH [overrides]`: an exported `vllm.yaml` measured on vLLM
against vLLM's own defaults, as it is: the verdict with its interval on the held-out window.

The file becomes a search space of one point (every key a `vllm.KEY` knob with the file's value as its only
choice, written as in the file: `executor.vllm.only_args`), so the study is two trials, vLLM's defaults (the
baseline, no engine flag) and the file, then the usual selection and proof (`tuner.results.conclude`): the
same machinery, report, best.yaml and MLflow record as any study with `executor=vllm`.

    file                        knob (search.params)                             written for the file's trial
    max-num-seqs: 256           max_num_seqs: {path: vllm.max_num_seqs, choices: [256]}        max-num-seqs: 256
    no-enable-prefix-caching    enable_prefix_caching: {..., choices: [false]}    no-enable-prefix-caching: true
    model: ...                  (none: executor.vllm.model, or runtime.model.name, is what vLLM serves)

The generated space goes to a folder added to Hydra's search path (`search=vllm_check`); every other override
is passed on (executor.vllm.model, executor.vllm.args, replay.*, validation.*, storage, tracking).
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

__all__ = ["check_space", "main"]

USAGE = "usage: python -m tuner.vllm_check VLLM_YAML +traffic=PATH [overrides]"


def check_space(exported: Mapping[str, Any]) -> dict[str, Any]:
    """The search space (conf/search's shape) of one point: the exported file's engine args, by dest."""
    params: dict[str, Any] = {}
    for key, value in exported.items():
        if key == "model":
            continue
        dest = key.replace("-", "_")
        if dest.startswith("no_") and value is True:
            dest, value = dest[3:], False
        if isinstance(value, list | dict):
            raise ValueError(f"{key}: a list or mapping value cannot be a knob's choice; pass it in "
                             f"executor.vllm.args for both configs instead")
        params[dest] = {"path": f"vllm.{dest}", "type": "categorical", "choices": [value]}
    if not params:
        raise ValueError("no engine argument besides the model: the file is vLLM's defaults already")
    return {"params": params}


def overrides(exported_path: Path, conf_dir: Path, rest: list[str]) -> list[str]:
    """Hydra overrides for the check: the one-point space written under `conf_dir`, two trials, one finalist."""
    exported = yaml.safe_load(exported_path.read_text()) or {}
    (conf_dir / "search").mkdir(parents=True, exist_ok=True)
    (conf_dir / "search" / "vllm_check.yaml").write_text(yaml.safe_dump(check_space(exported), sort_keys=False))
    return [f"hydra.searchpath=[file://{conf_dir}]", "search=vllm_check", "executor=vllm",
            "executor.vllm.only_args=true", "tuner.n_trials=2", "tuner.finalists=1", *rest]


def main(argv: list[str]) -> int:
    if not argv or "=" in argv[0]:
        print(USAGE, file=sys.stderr)
        return 2
    path = Path(argv[0])
    if not path.is_file():
        print(f"error: {path}: no such file\n{USAGE}", file=sys.stderr)
        return 2
    try:
        args = overrides(path, Path(tempfile.mkdtemp(prefix="pagetune-vllm-check-")), argv[1:])
    except (ValueError, yaml.YAMLError) as e:
        print(f"error: {path}: {e}", file=sys.stderr)
        return 2
    from tuner.__main__ import main as tuner_main

    sys.argv = [f"{sys.argv[0]}", *args]
    tuner_main()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
