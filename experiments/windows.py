"""The shared traces' windows the simulator experiments replay, and their requests as a profile's model takes
them (long prompts truncated to its limit)."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from runtime import EngineConfig, GpuProfile, engine_limits
from tuner.traffic import load_traffic, select

ROOT = Path(__file__).resolve().parents[1]


class Window(NamedTuple):
    """A stretch of a trace: from `start_s`, for `duration_s` (None: to the end) at `time_scale`, at most
    `requests` of it (None: every one)."""

    trace: str  # file name under .traces/ or ../shared/traces/
    start_s: float
    duration_s: float | None = None
    time_scale: float = 1.0
    requests: int | None = None

    def describe(self, count: int) -> str:
        """`40 requests of T from 300 s`, with the duration and scale where it has them."""
        text = f"{count} requests of {self.trace} from {self.start_s:g} s"
        return text + (f", {self.duration_s:g} s at x{self.time_scale:g}" if self.duration_s else "")


AZURE, MOONCAKE = "azure_llm_2023_code.csv", "mooncake_fast25_synthetic_trace.jsonl"
# sim_accuracy: the Azure code trace overloaded (x2), the Mooncake one's long shared-prefix prompts
ACCURACY_WINDOWS = {"azure": Window(AZURE, 600.0, 30.0, 2.0), "mooncake": Window(MOONCAKE, 100.0, 12.0, 1.0)}
# sim_capacity: a number of requests from a start (a capacity scales their rate)
CAPACITY_WINDOWS = {"azure": Window(AZURE, 1800.0, requests=120),
                    "mooncake": Window(MOONCAKE, 300.0, requests=40),
                    # the same start, 100 requests: at attainment 0.99 one request may miss (the tuner warns below 100)
                    "mooncake100": Window(MOONCAKE, 300.0, requests=100)}


def base_knobs(cpu: bool) -> dict[str, object]:
    """The flat engine knobs every config of the experiments starts from (on --cpu: the tiny model's)."""
    return {"device_memory_gb": 0.05, "max_model_len": 1024, "device": "cpu"} if cpu else {"max_model_len": 8192}


def window_requests(window: Window, profile: GpuProfile, cpu: bool, cpu_requests: int) -> tuple:
    """The window's requests, re-based to 0 and scaled; on --cpu at most `cpu_requests` of them."""
    return select(trace_requests(window.trace, profile, cpu), start_s=window.start_s, duration_s=window.duration_s,
                  time_scale=window.time_scale, max_requests=cpu_requests if cpu else window.requests)


def trace_requests(trace: str, profile: GpuProfile, cpu: bool) -> tuple:
    """A shared trace's requests as the profile's model takes them (long prompts truncated to its limit)."""
    limit = engine_limits(EngineConfig.from_flat(profile.model, **base_knobs(cpu)), profile.info).max_model_len
    return load_traffic(trace_path(trace), on_error="skip", vocab_size=profile.info.vocab_size, max_model_len=limit,
                        long_prompts="truncate").requests


def rate_rps(requests) -> float:
    """The window's arrival rate at x1 (a capacity scale times this is req/s)."""
    return (len(requests) - 1) / max(requests[-1].arrival_s - requests[0].arrival_s, 1e-9)


def trace_path(name: str) -> Path:
    for folder in (ROOT / ".traces", ROOT.parent / "shared" / "traces", Path("/work/shared/traces")):
        if (folder / name).is_file():
            return folder / name
    raise SystemExit(f"no trace {name} under .traces/ or ../shared/traces/")
