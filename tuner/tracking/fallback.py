"""The disabled tracker: records nothing in MLflow, says so, and keeps every payload in a JSONL file.

When the tracking store is unreachable and the user chose ``on_unreachable=continue``, the study
runs on and each call that would have written to MLflow appends one JSON line instead, so no trial
result is silently dropped. A line is ``{"event": ..., "time": <unix s>, ...payload}``; events are
``study_start``, ``trial_begin``, ``trial_end``, ``stale_running``, ``study_artifacts`` and
``study_finish``. Trial lines share a ``run_id`` so a reader can join a begin with its end.
Strings are masked (a config may hold a storage URL with its password); non-finite metrics are kept
as the strings "nan"/"inf".
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from tuner.tracking.payloads import RunState, TrialLogging, json_safe

__all__ = ["OFFLINE_PREFIX", "FallbackTracker", "is_offline"]

logger = logging.getLogger(__name__)

OFFLINE_PREFIX = "offline:"  # run ids handed out without MLflow; MLflow's own ids are 32 hex digits


def is_offline(run_id: str) -> bool:
    return run_id.startswith(OFFLINE_PREFIX)


class FallbackTracker(TrialLogging):
    """Same calls as :class:`tuner.tracking.Tracker`, appending JSON lines to ``path`` instead."""

    enabled = False

    def __init__(self, path: Path | str, reason: str) -> None:
        self.path = Path(path)
        self.reason = reason  # why MLflow is not used, already masked
        self.warned = False

    def _append(self, event: str, payload: Mapping[str, Any]) -> None:
        line = json.dumps(json_safe({"event": event, "time": time.time(), **payload}), allow_nan=False)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One write per line with O_APPEND: lines from several workers never interleave.
        with self.path.open("a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def start_study(self, study_name: str, config_yaml: str, tags: Mapping[str, Any],
                    params: Mapping[str, Any] | None = None) -> str:
        run_id = f"{OFFLINE_PREFIX}{study_name}"
        self._append("study_start", {"run_id": run_id, "study": study_name, "config_yaml": config_yaml,
                                     "tags": dict(tags), "params": dict(params or {}), "reason": self.reason})
        return run_id

    def begin_trial(self, parent_run_id: str, trial_number: int, params: Mapping[str, Any],
                    config_yaml: str, extra_tags: Mapping[str, Any]) -> str:
        parent = parent_run_id if is_offline(parent_run_id) else f"{OFFLINE_PREFIX}{parent_run_id}"
        run_id = f"{parent}:trial:{trial_number}"
        self._append("trial_begin", {"run_id": run_id, "parent_run_id": parent_run_id,
                                     "trial_number": trial_number, "params": dict(params),
                                     "config_yaml": config_yaml, "extra_tags": dict(extra_tags)})
        return run_id

    def end_trial(self, run_id: str, metrics: Mapping[str, float], state: RunState | str,
                  reason: str | None, latency_rows: Sequence[Mapping[str, Any]],
                  tags: Mapping[str, Any] | None = None) -> None:
        state = RunState(state)
        self._append("trial_end", {"run_id": run_id, "metrics": dict(metrics), "state": state, "reason": reason,
                                   "latency_rows": [dict(r) for r in latency_rows], "tags": dict(tags or {})})
        if not self.warned:  # the banner once per tracker; every payload is in the file anyway
            logger.warning("MLflow tracking is disabled: trial payloads go to %s (first: %s %s)", self.path, run_id,
                           state.value)
            self.warned = True


    def mark_stale_running(self, parent_run_id: str, alive_trial_numbers: Collection[int]) -> list[int]:
        # Nothing was left RUNNING in MLflow by this tracker; the reader sees begins without ends.
        self._append("stale_running", {"parent_run_id": parent_run_id,
                                       "alive_trial_numbers": sorted(alive_trial_numbers)})
        return []

    def log_study_artifacts(self, parent_run_id: str, files: Sequence[Path], metrics: Mapping[str, float],
                            tags: Mapping[str, str] | None = None,
                            history: Mapping[str, Sequence[tuple[int, float]]] | None = None) -> None:
        self._append("study_artifacts", {"run_id": parent_run_id, "files": [str(Path(f)) for f in files],
                                         "metrics": dict(metrics), "tags": dict(tags or {}),
                                         "history": {k: [list(p) for p in v] for k, v in (history or {}).items()}})

    def finish_study(self, parent_run_id: str, state: RunState | str = RunState.FINISHED) -> None:
        self._append("study_finish", {"run_id": parent_run_id, "state": RunState(state)})
