"""The search space: knobs declared in `conf/search/` by dotted runtime path, sampled through Optuna.

A knob is SEARCHED (an Optuna distribution), FIXED (`freeze: value`) or KEPT (`frozen: true`: the
runtime's own value stays). A knob that cannot change anything on the device in use (the Triton
thresholds on the CPU torch path, CUDA graphs without CUDA; the runtime says which) is KEPT and
listed in `inert`. A conditional knob (`when`) is active only while its parent knob is active and
has the given value; an inactive knob's runtime field is set to the runtime's own default, never
inherited from the base config, so a value that only fits the other branch (CUDA graphs with block
tiers) cannot leak in. `apply` turns a trial's values into an `EngineConfig` once, validated once.
Tier fields (`tiers.*`) are not runtime paths: `apply` turns them into `runtime.cache.block_tiers`:

    tiers.enabled=false -> block_tiers: []                      (one tier of cache.block_size)
    tiers.enabled=true  -> block_tiers: [{max_len: boundary,      block_size: short_block_size, share: s},
                                         {max_len: LONG_MAX_LEN*, block_size: long_block_size,  share: 1 - s}]
    * scheduler.max_model_len when set; the runtime stretches the last tier to max_model_len anyway.

A `vllm.NAME` knob (search=vllm) is a vLLM engine argument with no runtime field (async_scheduling,
cudagraph_capture_sizes): `apply` keeps it in the config's `metadata` (`tuner.vllm.VLLM_META`), where
`executor=vllm` reads it; an inactive or null one is left to vLLM's default. Its name is checked against
vLLM's own argument list by the executor, not here.

The baseline trial runs the baseline config itself (`tuner.app`); its knob values (`values_of`) are
what Optuna records. Optuna 5 accepts an enqueued number outside its distribution (with a warning,
and stores it under the declared range) but fails the trial for a categorical value that is not a
choice, and nothing fits a None default such as max_num_batched_tokens. So `enqueue_baseline`
enqueues as params only the values inside their distributions and carries all of them in a user
attr that `suggest` reads back.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from runtime import ConfigError, EngineConfig
from tuner.config import ParamConfig, SearchConfig, TunerConfigError
from tuner.store.record import BASELINE_ATTR
from tuner.vllm import vllm_args, with_vllm_args

__all__ = ["LONG_TIER_MAX_LEN", "TIER_FIELDS", "Knob", "KnobMode", "SearchSpace", "set_path"]

TIER_FIELDS = ("enabled", "boundary", "short_block_size", "long_block_size", "short_share")
LONG_TIER_MAX_LEN = 1 << 20  # the long tier's max_len: "the rest"; the runtime cuts it at max_model_len
_DEFAULTS = EngineConfig().to_dict()  # where an inactive knob's field goes: the runtime's own default


class KnobMode(Enum):
    SEARCHED = "searched"  # sampled from `distribution`
    FIXED = "fixed"  # `freeze: value`: the same value in every trial
    KEPT = "kept"  # `frozen: true`: not set, the runtime's own value stays


@dataclass(frozen=True)
class Knob:
    name: str  # Optuna param name and MLflow param name
    path: str  # runtime.SECTION.FIELD or tiers.FIELD
    mode: KnobMode
    distribution: BaseDistribution  # validated even when not searched, so unfreezing cannot fail late
    fixed: Any = None  # the value of a FIXED knob
    when: tuple[str, Any] | None = None  # (parent knob, value it must have)


@dataclass(frozen=True)
class SearchSpace:
    knobs: tuple[Knob, ...]  # a conditional knob always comes after its parent
    inert: tuple[str, ...] = ()  # knobs not searched: they cannot change anything on this device

    @classmethod
    def from_config(cls, search: SearchConfig, inert_fields: frozenset[str] = frozenset()) -> SearchSpace:
        """Check every declaration (path, type, bounds, condition); errors name search.params.NAME.
        `inert_fields`: dotted runtime fields (`kernel.cuda_graphs`) with no effect on the device in use."""
        knobs = {name: _knob(name, spec) for name, spec in search.params.items()}
        _check_tiers(knobs)
        inert = tuple(name for name, k in knobs.items()
                      if k.mode is KnobMode.SEARCHED and k.path.removeprefix("runtime.") in inert_fields)
        kept = {name: dataclasses.replace(knobs[name], mode=KnobMode.KEPT) for name in inert}
        return cls(knobs=_parents_first({**knobs, **kept}), inert=inert)

    @property
    def searched(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.knobs if k.mode is KnobMode.SEARCHED)

    def suggest(self, trial: optuna.trial.BaseTrial, base: EngineConfig) -> dict[str, Any]:
        """Knob values for `trial` (FIXED knobs included, inactive and KEPT ones left out)."""
        recorded = trial.user_attrs.get(BASELINE_ATTR)
        if recorded is not None:
            return self._suggest_recorded(trial, recorded)
        values: dict[str, Any] = {}
        context = self._kept_values(base)
        for knob in self.knobs:
            if self._active(knob, {**context, **values}) and knob.mode is not KnobMode.KEPT:
                values[knob.name] = knob.fixed if knob.mode is KnobMode.FIXED else _suggest(trial, knob)
        return values

    def _suggest_recorded(self, trial: optuna.trial.BaseTrial, recorded: Mapping[str, Any]) -> dict[str, Any]:
        values = {}
        for knob in self.knobs:
            if knob.name in recorded:  # a value inside the distribution is recorded as the trial's param
                inside = knob.mode is KnobMode.SEARCHED and _contains(knob.distribution, recorded[knob.name])
                values[knob.name] = _suggest(trial, knob) if inside else recorded[knob.name]
        return values

    def apply(self, base: EngineConfig, values: Mapping[str, Any]) -> EngineConfig:
        """`base` with `values` at their paths and every inactive knob's field at its default: one validation."""
        by_name = {k.name: k for k in self.knobs}
        for name in values:
            if name not in by_name:
                raise TunerConfigError(f"unknown knob {name!r}{_close(name, list(by_name))}")
        out = base.to_dict()
        context = {**self._kept_values(base), **values}
        tiers: dict[str, Any] = {}
        engine_args: dict[str, Any] = {}
        for knob in self.knobs:
            section, key = knob.path.split(".", 1)
            if not self._active(knob, context):
                if knob.name in values:
                    parent, equals = knob.when  # type: ignore[misc]
                    raise TunerConfigError(f"knob {knob.name!r} is inactive: it applies only when {parent} is "
                                           f"{equals!r} (knob values {dict(values)})")
                if section == "runtime":
                    set_path(out, key, _get_path(_DEFAULTS, key))
            elif knob.name in values:
                if section == "tiers":
                    tiers[key] = values[knob.name]
                elif section == "vllm":
                    engine_args[key] = values[knob.name]
                else:
                    set_path(out, key, values[knob.name])
        if "enabled" in tiers:
            out["cache"]["block_tiers"] = _make_tiers(tiers)
        if engine_args:
            out["metadata"] = with_vllm_args(out.get("metadata"), engine_args)
        try:
            return EngineConfig.from_mapping(out)
        except ConfigError as e:
            raise TunerConfigError(f"runtime.{e} (knob values {dict(values)})") from None

    def values_of(self, config: EngineConfig) -> dict[str, Any]:
        """The knob values of a config (active knobs only): what the baseline trial records."""
        runtime = config.to_dict()
        tiers = _tier_values(runtime)
        values: dict[str, Any] = {}
        context = self._kept_values(config)
        for knob in self.knobs:
            if not self._active(knob, {**context, **values}) or knob.mode is KnobMode.KEPT:
                continue
            section, key = knob.path.split(".", 1)
            if section == "runtime":
                values[knob.name] = _get_path(runtime, key)
            elif section == "vllm":
                values[knob.name] = vllm_args(config).get(key)
            elif tiers is not None and key in tiers:
                values[knob.name] = tiers[key]
        return values

    def with_fixed(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """`values` with every FIXED knob's value (a frozen knob holds for the baseline too)."""
        return {**values, **{k.name: k.fixed for k in self.knobs if k.mode is KnobMode.FIXED and k.name in values}}

    def enqueue_baseline(self, study: optuna.Study, values: Mapping[str, Any]) -> None:
        """Enqueue the baseline's knob values once per study (a resumed study keeps its own)."""
        if not any(BASELINE_ATTR in t.user_attrs for t in study.get_trials(deepcopy=False)):
            inside = {k.name: values[k.name] for k in self.knobs if k.name in values
                      and k.mode is KnobMode.SEARCHED and _contains(k.distribution, values[k.name])}
            study.enqueue_trial(inside, user_attrs={BASELINE_ATTR: dict(values)})

    def _kept_values(self, base: EngineConfig) -> dict[str, Any]:
        """KEPT runtime knobs take the base config's value, for the conditions of their children."""
        runtime = base.to_dict()
        return {k.name: _get_path(runtime, k.path.split(".", 1)[1]) for k in self.knobs
                if k.mode is KnobMode.KEPT and k.path.startswith("runtime.")}

    def _active(self, knob: Knob, values: Mapping[str, Any]) -> bool:
        if knob.when is None:
            return True
        parent, equals = knob.when
        return parent in values and _same(values[parent], equals)


# --- declarations ---------------------------------------------------------------------------------

def _runtime_leaves() -> frozenset[str]:
    def walk(node: Mapping[str, Any], prefix: str) -> list[str]:
        keys = []
        for key, value in node.items():
            keys += walk(value, f"{prefix}{key}.") if isinstance(value, dict) else [f"{prefix}{key}"]
        return keys
    # block_tiers is searched through tiers.*; metadata is provenance, not a knob.
    leaves = frozenset(walk(_DEFAULTS, "runtime."))
    return leaves - {"runtime.cache.block_tiers", "runtime.metadata"}


_PATHS = _runtime_leaves() | {f"tiers.{f}" for f in TIER_FIELDS}


def _knob(name: str, spec: ParamConfig) -> Knob:
    key = f"search.params.{name}"
    if spec.path not in _PATHS and not _is_vllm_path(spec.path):
        raise TunerConfigError(f"{key}.path: unknown runtime path {spec.path!r}{_close(spec.path, _PATHS)}")
    keeps_tier_field = spec.path.startswith("tiers.") and spec.path != "tiers.enabled"
    if spec.frozen and spec.freeze is None and keeps_tier_field:
        raise TunerConfigError(f"{key}.frozen: a tier field has no runtime value to keep; use freeze: VALUE")
    mode = KnobMode.FIXED if spec.freeze is not None else KnobMode.KEPT if spec.frozen else KnobMode.SEARCHED
    when = None if spec.when is None else (spec.when.param, spec.when.equals)
    return Knob(name, spec.path, mode, _distribution(key, spec), spec.freeze, when)


def _is_vllm_path(path: str) -> bool:
    """`vllm.NAME`: a vLLM engine argument (its dest, `async_scheduling`) with no runtime field."""
    section, _, name = path.partition(".")
    return section == "vllm" and name.isidentifier()


def _distribution(key: str, spec: ParamConfig) -> BaseDistribution:
    numeric = {"low": spec.low, "high": spec.high, "step": spec.step, "log": spec.log or None}
    if spec.type == "categorical":
        for field_name, value in numeric.items():
            _require(value is None, f"{key}.{field_name}", "only int and float knobs take low/high/step/log")
        _require(bool(spec.choices), f"{key}.choices", "a categorical knob needs a non-empty list of choices")
        for choice in spec.choices or []:
            _require(choice is None or isinstance(choice, bool | int | float | str), f"{key}.choices",
                     f"choices must be null, bool, int, float or str, got {choice!r}")
        return CategoricalDistribution(tuple(spec.choices or ()))
    _require(spec.type in ("int", "float"), f"{key}.type",
             f"must be categorical, int or float, got {spec.type!r}")
    _require(spec.choices is None, f"{key}.choices", f"{spec.type} knobs take low/high, not choices")
    _require(spec.low is not None and spec.high is not None, key, f"{spec.type} knobs need low and high")
    low, high = float(spec.low), float(spec.high)  # type: ignore[arg-type]
    for field_name, value in (("low", low), ("high", high), ("step", spec.step)):
        _require(value is None or math.isfinite(value), f"{key}.{field_name}", f"must be finite, got {value}")
    _require(low <= high, f"{key}.low", f"must be <= high, got low={low:g} high={high:g}")
    _require(not spec.log or low > 0, f"{key}.low", "must be > 0 with log: true")
    _require(not (spec.log and spec.step not in (None, 1)), f"{key}.step", "cannot be used with log: true")
    _require(spec.step is None or spec.step > 0, f"{key}.step", f"must be > 0, got {spec.step}")
    if spec.type == "float":
        try:
            return FloatDistribution(low, high, log=spec.log, step=spec.step)
        except ArithmeticError:  # Optuna's decimal grid holds at most 28 digits of (high - low) / step
            raise TunerConfigError(f"{key}.step: {spec.step:g} is too small a grid step for "
                                   f"[{low:g}, {high:g}]") from None
    for field_name, value in (("low", low), ("high", high), ("step", spec.step or 1)):
        _require(float(value).is_integer(), f"{key}.{field_name}", f"must be an integer, got {value}")
    return IntDistribution(int(low), int(high), log=spec.log, step=int(spec.step or 1))


def _check_tiers(knobs: Mapping[str, Knob]) -> None:
    fields = {k.path.split(".", 1)[1]: name for name, k in knobs.items() if k.path.startswith("tiers.")}
    if fields:
        missing = [f"tiers.{f}" for f in TIER_FIELDS if f not in fields]
        _require(not missing, "search.params", f"tier knobs need every tier field; missing {missing}")


def _parents_first(knobs: Mapping[str, Knob]) -> tuple[Knob, ...]:
    ordered: dict[str, Knob] = {}

    def visit(name: str, seen: tuple[str, ...]) -> None:
        knob = knobs[name]
        if name in ordered:
            return
        if knob.when is not None:
            parent = knob.when[0]
            key = f"search.params.{name}.when.param"
            _require(parent in knobs, key, f"unknown knob {parent!r}{_close(parent, list(knobs))}")
            _require(parent not in seen, key, f"conditions form a cycle: {' -> '.join((*seen, parent))}")
            visit(parent, (*seen, parent))
        ordered[name] = knob

    for name in knobs:
        visit(name, (name,))
    return tuple(ordered.values())


# --- values ---------------------------------------------------------------------------------------

def _suggest(trial: optuna.trial.BaseTrial, knob: Knob) -> Any:
    d = knob.distribution
    if isinstance(d, CategoricalDistribution):
        return trial.suggest_categorical(knob.name, d.choices)
    if isinstance(d, IntDistribution):
        return trial.suggest_int(knob.name, d.low, d.high, step=d.step, log=d.log)
    assert isinstance(d, FloatDistribution)
    return trial.suggest_float(knob.name, d.low, d.high, step=d.step, log=d.log)


def _same(a: Any, b: Any) -> bool:
    """Equal and both bool or both not (True == 1 in Python, but not as a knob value)."""
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def _contains(d: BaseDistribution, value: Any) -> bool:
    if isinstance(d, CategoricalDistribution):
        return any(_same(value, c) for c in d.choices)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(d, IntDistribution):
        return isinstance(value, int) and d.low <= value <= d.high and (value - d.low) % d.step == 0
    assert isinstance(d, FloatDistribution)
    on_grid = d.step is None or abs(round((value - d.low) / d.step) * d.step - (value - d.low)) < 1e-9
    return d.low <= value <= d.high and on_grid


def _get_path(runtime: Mapping[str, Any], dotted: str) -> Any:
    node: Any = runtime
    for part in dotted.split("."):
        node = node[part]
    return node


def set_path(runtime: dict[str, Any], dotted: str, value: Any) -> None:
    """Put `value` at the dotted path of a nested runtime dict (`cache.block_size`)."""
    *sections, leaf = dotted.split(".")
    node = runtime
    for part in sections:
        node = node.setdefault(part, {})
    node[leaf] = value


def _make_tiers(tiers: Mapping[str, Any]) -> list[dict[str, Any]]:
    if not tiers["enabled"]:
        return []
    share = round(tiers["short_share"], 6)  # a float step leaves 0.7000000000000001 in best.yaml otherwise
    # The runtime cuts the last tier (and any tier past it) at the engine's max_model_len.
    return [{"max_len": tiers["boundary"], "block_size": tiers["short_block_size"], "share": share},
            {"max_len": LONG_TIER_MAX_LEN, "block_size": tiers["long_block_size"], "share": round(1.0 - share, 6)}]


def _tier_values(runtime: Mapping[str, Any]) -> dict[str, Any] | None:
    """The tier fields that reproduce the runtime's block_tiers, or None when two tiers cannot."""
    current = list(runtime.get("cache", {}).get("block_tiers", []))
    if not current:
        return {"enabled": False}
    if len(current) != 2:
        return None
    short, long = current
    values = {"enabled": True, "boundary": short["max_len"], "short_block_size": short["block_size"],
              "long_block_size": long["block_size"], "short_share": short["share"]}
    return values if _make_tiers(values) == current else None


def _close(word: str, options: Any) -> str:
    close = difflib.get_close_matches(word, sorted(options), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _require(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise TunerConfigError(f"{key}: {message}")
