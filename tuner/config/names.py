"""The config's names: the repository's config tree, the default GPU profile, the enums of every choice, and the
error (`TunerConfigError`, naming the dotted key) with its one check."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

__all__ = ["CONF_DIR", "DEFAULT_PROFILE", "EXECUTOR_KINDS", "FIDELITIES", "BaselineName", "LongPrompts",
           "ObjectiveName", "OnError", "PrunerName", "ResumeMode", "SamplerName", "StorageBackend", "TrafficFormat",
           "TunerConfigError", "check"]

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"  # the Hydra config tree of the repository
# The simulator's default GPU profile (python -m runtime.profile on an H200): what executor=auto simulates on a
# machine without a GPU, and executor=sim without executor.profile.
DEFAULT_PROFILE = CONF_DIR / "profiles" / "h200-llama-3-8b.json"
EXECUTOR_KINDS = ("auto", "real", "sim", "vllm")
FIDELITIES = ("single", "sim+real")


class SamplerName(str, Enum):
    tpe = "tpe"
    gp = "gp"
    nsga2 = "nsga2"
    random = "random"
    qmc = "qmc"


class PrunerName(str, Enum):
    incumbent = "incumbent"  # capacity: stop a candidate that fails the SLO at the incumbent's capacity
    none = "none"


class ObjectiveName(str, Enum):
    capacity = "capacity"  # the highest arrival rate of the replayed window at which the SLO holds (req/s)
    goodput = "goodput"  # requests/s meeting every SLO at the given rate, attainment as a constraint
    pareto = "pareto"  # throughput vs. p99 latency, a Pareto front


class BaselineName(str, Enum):
    vllm = "vllm"  # `vllm serve`'s defaults on this device for the knobs pagetune shares with vLLM
    runtime = "runtime"  # the composed runtime config as it is


class ResumeMode(str, Enum):
    auto = "auto"  # resume a study only when its fingerprint (traffic, window, model, objective...) matches
    force = "force"  # resume whatever differs (recorded on the study)


class StorageBackend(str, Enum):
    rdb = "rdb"
    journal = "journal"


class TrafficFormat(str, Enum):
    auto = "auto"
    native = "native"
    mooncake = "mooncake"
    azure = "azure"
    openai = "openai"


class LongPrompts(str, Enum):
    reject = "reject"
    truncate = "truncate"


# Functional form: `raise` is a keyword. Hydra matches enum values by member name.
OnError = Enum("OnError", [("raise", "raise"), ("skip", "skip")], type=str)


class TunerConfigError(ValueError):
    """A tuner configuration value or key is wrong; the message names the dotted key."""


def check(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise TunerConfigError(f"{key}: {message}")
