"""Traffic: recorded request logs in, replayable requests out.

    requests  TrafficRequest, TrafficLoad, SkippedLine, TrafficError, the limits
    reader    bounded, numbered lines of a plain or gzip file
    fields    one JSON line and its validated fields; ParsedLine, LineError
    tokens    deterministic prompt tokens (shared prefixes, byte-level text synthesis)
    native, mooncake, azure, openai_log   one module per format (each documents its shape)
    formats   the registry and content-based detection
    loader    load_traffic
    select    select (window, sample, cap, time scale), split_windows (search / validation)
    stats     length_percentiles, max_model_len_candidates, arrival_rate, peak_rate, arrival_groups
    synth     synthetic traffic generator (python -m tuner.traffic.synth --help)
"""

from __future__ import annotations

from pathlib import Path

from tuner.traffic.formats import FORMATS
from tuner.traffic.loader import load_traffic
from tuner.traffic.requests import (
    MAX_LINE_BYTES,
    MAX_TOKENS,
    SkippedLine,
    TrafficError,
    TrafficLoad,
    TrafficRequest,
)
from tuner.traffic.select import ReplayWindow, Windows, rebase, select, split_windows
from tuner.traffic.stats import (
    GROUPED_SHARE,
    ArrivalGroups,
    LengthPercentile,
    MaxLenCandidate,
    arrival_groups,
    arrival_rate,
    length_percentiles,
    max_model_len_candidates,
    peak_rate,
)
from tuner.traffic.tokens import TOKEN_ID_OFFSET

SAMPLE_TRAFFIC = Path(__file__).resolve().parent.parent / "data" / "sample.jsonl"  # the project's own sample

__all__ = [
    "FORMATS",
    "GROUPED_SHARE",
    "MAX_LINE_BYTES",
    "MAX_TOKENS",
    "SAMPLE_TRAFFIC",
    "TOKEN_ID_OFFSET",
    "ArrivalGroups",
    "LengthPercentile",
    "MaxLenCandidate",
    "ReplayWindow",
    "SkippedLine",
    "TrafficError",
    "TrafficLoad",
    "TrafficRequest",
    "Windows",
    "arrival_groups",
    "arrival_rate",
    "length_percentiles",
    "load_traffic",
    "max_model_len_candidates",
    "peak_rate",
    "rebase",
    "select",
    "split_windows",
]
