"""A tracking store that goes away during a study (`tracking.on_unreachable=continue`).

    store answers --(a write fails)--> DOWN: banner once; every payload to the fallback file, no
         ^                             MLflow call (the study runs at full speed)
         |                                  |  at most every PROBE_EVERY_S, on the next tracker call:
         +---(probe passes, file replayed)--+  a short probe; when it passes, the file is replayed

MLflow's HTTP client would retry an unreachable server for minutes (7 retries, a 120 s timeout each);
`limit_http_retries` sets our own bound for this process, so a store that is down is seen in seconds.
"""

from __future__ import annotations

import logging
import os
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path

from tuner.redact import mask_url
from tuner.tracking.fallback import FallbackTracker

__all__ = ["HTTP_LIMITS", "PROBE_EVERY_S", "Outage", "limit_http_retries"]

logger = logging.getLogger("pagetune")

# mlflow.environment_variables, read on each request: one retry after ~1 s, 5 s per attempt.
HTTP_LIMITS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
               "MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}
PROBE_EVERY_S = 5.0


def limit_http_retries(uri: str) -> None:
    """For an HTTP(S) tracking URI: MLflow's retries bounded to seconds in this process (a value the user
    set in the environment is kept)."""
    if urllib.parse.urlsplit(uri).scheme.lower() in ("http", "https"):
        for key, value in HTTP_LIMITS.items():
            os.environ.setdefault(key, value)


class Outage:
    """Whether the store is away, the one fallback file its payloads go to meanwhile, and when to look again."""

    def __init__(self, uri: str, fallback_path: Path, clock: Callable[[], float] = time.monotonic) -> None:
        self.uri = mask_url(uri)
        self.fallback = FallbackTracker(fallback_path, "the tracking store is unreachable")
        self.fallback.warned = True  # the banner below says it
        self._clock = clock
        self.since: float | None = None
        self._last_look = 0.0

    @property
    def active(self) -> bool:
        return self.since is not None

    def begin(self, message: str, said: bool = False) -> None:
        """The store is away (`said`: the caller's banner said so already)."""
        if self.since is None:
            self.since = self._last_look = self._clock()
            if said:
                return
            logger.warning("%s. The study goes on without MLflow: every payload is kept in %s and replayed into "
                           "MLflow when the store is back (or: python -m tuner.tracking %s --uri %s)",
                           message, self.fallback.path, self.fallback.path, self.uri)

    def due(self) -> bool:
        """Time to look whether the store is back (at most every PROBE_EVERY_S)."""
        if self.since is None or self._clock() - self._last_look < PROBE_EVERY_S:
            return False
        self._last_look = self._clock()
        return True

    def end(self, replayed: int) -> None:
        logger.warning("MLflow tracking store %s is back after %.0f s: %d records replayed from %s", self.uri,
                       self._clock() - (self.since or self._clock()), replayed, self.fallback.path)
        self.since = None
