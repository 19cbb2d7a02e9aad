"""vLLM's engine argument list, and the check of a study's vLLM keys and values against it.

An argument list is what `EngineArgs.add_cli_args` puts on vLLM's parser: per option (its argparse `dest`,
`max_num_seqs`) the long flags, the argparse action, the choices, the type's name and nargs. The installed
vLLM's own list comes from `tuner/executors/vllm_probe.py` (run with vLLM's Python); the pinned release's is
shipped as data (`tuner/data/vllm-<version>-args.json`, dumped the same way) so CI checks against it.

    value written        accepted when the option is
    true / false         a flag (BooleanOptionalAction, store_true: only true)
    one of `choices`     restricted to choices
    int / float          typed int (human_readable_int too) / float
    [a, b, ...]          nargs + or *, each item by the type
    null                 anything: left out of the file, vLLM's default
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from tuner.config import TunerConfigError

__all__ = ["PINNED_VERSION", "VllmArgError", "VllmArgList", "VllmOptionSpec", "recorded_args"]

PINNED_VERSION = "0.26.0"  # the release the shipped argument list and the GPU study are for
_DATA = Path(__file__).parent / "data"
_FLAG_ACTIONS = ("BooleanOptionalAction", "_StoreTrueAction")
_INT_TYPES = ("int", "human_readable_int", "human_readable_int_or_auto")


class VllmArgError(TunerConfigError):
    """A key or value the vLLM in use does not take; the message names the key and the version."""


@dataclass(frozen=True)
class VllmOptionSpec:
    dest: str  # argparse dest: the EngineArgs field (`max_num_seqs`)
    flags: tuple[str, ...]  # long flags (`--max-num-seqs`; `--no-...` for a BooleanOptionalAction)
    action: str  # argparse action class name
    choices: tuple[str, ...] | None  # accepted values (as strings), when restricted
    type: str | None  # the type callable's name (`int`, `float`, `str`, ...)
    nargs: str | int | None

    @property
    def key(self) -> str:
        """The `vllm serve --config` key: the first long flag without its dashes."""
        return self.flags[0].removeprefix("--")

    def problem(self, value: Any) -> str | None:
        """Why `value` is not one this option takes, or None when it is."""
        if value is None:
            return None
        if self.action in _FLAG_ACTIONS:
            ok = isinstance(value, bool) and (value or self.action == "BooleanOptionalAction")
            return None if ok else "a flag takes true" + (" or false" if self.action == "BooleanOptionalAction" else "")
        if self.nargs in ("+", "*"):
            if not isinstance(value, list | tuple) or not value:
                return "takes a non-empty list"
            return next((p for p in map(self._scalar_problem, value) if p), None)
        return self._scalar_problem(value)

    def _scalar_problem(self, value: Any) -> str | None:
        if self.choices is not None and str(value) not in self.choices:
            return f"{value!r} is not one of its choices {list(self.choices)}"
        if self.type in _INT_TYPES and (isinstance(value, bool) or not isinstance(value, int)):
            return f"takes an int, got {value!r}"
        if self.type == "float" and (isinstance(value, bool) or not isinstance(value, int | float)):
            return f"takes a number, got {value!r}"
        if isinstance(value, Mapping | list | tuple):
            return f"takes one value, got {value!r}"
        return None


@dataclass(frozen=True)
class VllmArgList:
    version: str
    options: Mapping[str, VllmOptionSpec]  # by dest

    @classmethod
    def from_mapping(cls, version: str, args: Mapping[str, Mapping[str, Any]]) -> VllmArgList:
        """From the probe's (or the recorded file's) `args`: {dest: {flags, action, choices, type, nargs}}."""
        options = {dest: VllmOptionSpec(dest, tuple(a["flags"]), a["action"],
                                        None if a.get("choices") is None else tuple(map(str, a["choices"])),
                                        a.get("type"), a.get("nargs"))
                   for dest, a in args.items()}
        return cls(version, MappingProxyType(options))

    def option(self, name: str, where: str) -> VllmOptionSpec:
        """The option named by dest (`async_scheduling`) or config key (`async-scheduling`)."""
        dest = name.replace("-", "_")
        spec = self.options.get(dest)
        if spec is None and dest.startswith("no_"):  # a false BooleanOptionalAction written as `no-KEY: true`
            spec = self.options.get(dest[3:])
            spec = spec if spec is not None and spec.action == "BooleanOptionalAction" else None
        if spec is None:
            close = difflib.get_close_matches(name.replace("-", "_"), list(self.options), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise VllmArgError(f"{where}: vLLM {self.version} has no engine option {name!r}{hint}")
        return spec

    def check(self, name: str, value: Any, where: str) -> VllmOptionSpec:
        """Raise VllmArgError when vLLM has no option `name` or it does not take `value`."""
        spec = self.option(name, where)
        problem = spec.problem(value)
        if problem is not None:
            raise VllmArgError(f"{where}: vLLM {self.version}'s --{spec.key} {problem}")
        return spec


def recorded_args(version: str = PINNED_VERSION) -> VllmArgList:
    """The shipped argument list of vLLM `version` (tuner/data/vllm-VERSION-args.json)."""
    path = _DATA / f"vllm-{version}-args.json"
    if not path.is_file():
        raise VllmArgError(f"no recorded argument list for vLLM {version} at {path}")
    data = json.loads(path.read_text())
    return VllmArgList.from_mapping(data["version"], data["args"])
