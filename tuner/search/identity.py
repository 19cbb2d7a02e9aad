"""A study's identity: what it measures, as a fingerprint its results are bound to.

The fingerprint covers the traffic (the file's sha256), the replayed window, the model and the
runtime config trials start from, the objective and SLO, the search space and the baseline. The
default study name is the traffic file's stem plus the fingerprint's first 8 hex digits, so another
file or another window is another study.
A study found under an explicit name with another fingerprint is not resumed (`StudyMismatch` says
what differs) unless `tuner.resume=force`, which is recorded on the study.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any, NamedTuple

import optuna

from tuner.config import AppConfig, ResumeMode, TunerConfigError, traffic_stem

__all__ = ["FINGERPRINT_ATTR", "FORCED_ATTR", "PARTS_ATTR", "StudyIdentity", "StudyMismatch", "study_identity"]

FINGERPRINT_ATTR = "pagetune.fingerprint"
PARTS_ATTR = "pagetune.fingerprint_parts"
FORCED_ATTR = "pagetune.forced_resumes"


class StudyMismatch(TunerConfigError):
    """A study of this name exists and measures something else."""


class StudyIdentity(NamedTuple):
    name: str
    fingerprint: str  # sha256 hex of `parts`
    parts: dict[str, Any]  # what the study measures, by name

    def params(self) -> dict[str, Any]:
        """What the study measures, flat (`slo.ttft_s`): the MLflow parent run's params. The search space and
        the runtime config are in the parent's config artifact; their part of the fingerprint is here."""
        flat: dict[str, Any] = {"fingerprint": self.fingerprint}
        for key, value in self.parts.items():
            if key in ("space", "runtime"):
                flat[f"{key}_sha256"] = hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]
            elif isinstance(value, dict):
                flat |= {f"{key}.{k}": v for k, v in value.items()}
            else:
                flat[key] = value
        return flat

    def bind(self, study: optuna.Study, resume: ResumeMode) -> None:
        """Stamp a new study, or check a resumed one (force: record the override and go on)."""
        attrs = study.user_attrs
        if FINGERPRINT_ATTR not in attrs:
            study.set_user_attr(FINGERPRINT_ATTR, self.fingerprint)
            study.set_user_attr(PARTS_ATTR, self.parts)
            return
        if attrs[FINGERPRINT_ATTR] == self.fingerprint:
            return
        differ = sorted(k for k in {*self.parts, *attrs.get(PARTS_ATTR, {})}
                        if self.parts.get(k) != attrs.get(PARTS_ATTR, {}).get(k))
        if resume is not ResumeMode.force:
            raise StudyMismatch(
                f"tuner.study_name: study {self.name!r} was made with other settings ({', '.join(differ)} differ); "
                "pick another tuner.study_name (or leave it unset), or resume it anyway with tuner.resume=force")
        study.set_user_attr(FORCED_ATTR, [*attrs.get(FORCED_ATTR, []), {"fingerprint": self.fingerprint,
                                                                          "differ": differ}])


def study_identity(app: AppConfig, traffic_sha256: str, simulated: str | None = None,
                   engine: Mapping[str, Any] | None = None) -> StudyIdentity:
    """`simulated`: the GPU profile's sha256 when the trials are simulated (a simulated study is another study);
    `engine`: what serves the trials when it is not the runtime (executor=vllm: vLLM's version, model and args)."""
    window = {k: getattr(app.replay, k) for k in ("start_s", "duration_s", "max_requests", "sample", "seed",
                                                  "time_scale", "long_prompts", "min_window_s")}
    parts = {
        "traffic_sha256": traffic_sha256,
        "window": {**_plain(window), "holdout_fraction": app.validation.holdout_fraction},
        "model": app.runtime.model.name,
        "runtime": _plain({k: v for k, v in app.runtime.to_dict().items() if k != "metadata"}),
        "objective": app.tuner.objective.value,
        "slo": _plain(dataclasses.asdict(app.slo)),
        "space": _plain(dataclasses.asdict(app.search)),
        "baseline": app.baseline.value,
    }
    if app.devices != 1:  # another deployment (one device keeps the fingerprints of studies made before the key)
        parts["devices"] = app.devices
    if simulated is not None:
        parts["simulated"] = {"profile_sha256": simulated, "fidelity": app.tuner.fidelity}
    if engine is not None:
        parts["engine"] = _plain(engine)
    fingerprint = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()
    name = app.tuner.study_name or f"{traffic_stem(str(app.traffic))}-{fingerprint[:8]}"
    return StudyIdentity(name, fingerprint, parts)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return getattr(value, "value", value)  # enums by value
