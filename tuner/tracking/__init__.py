"""Experiment tracking: MLflow runs for a study and its trials, with a JSONL fallback.

See ``tracker.py`` for the call order. Public names are re-exported here.
"""

from __future__ import annotations

from tuner.tracking.fallback import FallbackTracker
from tuner.tracking.payloads import (
    CONFIG_ARTIFACT,
    LATENCY_ARTIFACT,
    REASON_ARTIFACT,
    STATUS_TAG,
    TAG_NOTE,
    TAG_REASON,
    TAG_STUDY,
    TAG_TRIAL,
    WORKER_DIED,
    OnUnreachable,
    RunState,
    TrackingError,
    review_link,
)
from tuner.tracking.tracker import Tracker, open_tracker

__all__ = [
    "CONFIG_ARTIFACT",
    "LATENCY_ARTIFACT",
    "REASON_ARTIFACT",
    "STATUS_TAG",
    "TAG_NOTE",
    "TAG_REASON",
    "TAG_STUDY",
    "TAG_TRIAL",
    "WORKER_DIED",
    "FallbackTracker",
    "OnUnreachable",
    "RunState",
    "Tracker",
    "TrackingError",
    "open_tracker",
    "review_link",
]
