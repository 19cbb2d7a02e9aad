"""Re-send a tracking fallback file to MLflow: what a study recorded while the store was away.

    python -m tuner.tracking OUTPUT/tracking-fallback.jsonl --uri http://mlflow:5000 [--experiment pagetune]

The tracker does the same by itself when the store comes back during the study (`Tracker`'s `_resend_if_back`,
through `resend` here: this module takes any tracker and imports none). Each line is one
call of the tracker (`tracking.fallback`), replayed in order through a `Tracker` that fails rather
than falls back. Lines replayed are counted in `<file>.replayed`, so a replay that stops (the store
went away again) resumes at the first line it did not write, and no line is written twice.

Run ids handed out offline (`offline:<study>`, `offline:<parent>:trial:<n>`) are found again in MLflow
by the tags every run carries (the study, the trial number), so a replay may continue one that an
earlier replay began.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from tuner.tracking import runs
from tuner.tracking.fallback import OFFLINE_PREFIX, is_offline
from tuner.tracking.payloads import RunState, TrackingError

__all__ = ["Resent", "lines_resent", "resend"]


class Resent(NamedTuple):
    written: int  # lines of the file written to MLflow by this replay
    ids: dict[str, str]  # each offline run id met -> its MLflow run id

_TRIAL_SEP = ":trial:"


def _done_path(path: Path) -> Path:
    return path.with_name(path.name + ".replayed")


def lines_resent(path: Path) -> int:
    done = _done_path(path)
    return int(done.read_text()) if done.exists() else 0


def _floats(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The fallback keeps non-finite metrics as strings ("nan", "inf"): floats again."""
    return {k: float(v) for k, v in metrics.items() if isinstance(v, int | float | str)}


class _Ids:
    """Offline run id -> MLflow run id, from this replay's own writes or the tags of earlier ones."""

    def __init__(self, tracker: Any) -> None:
        self.tracker = tracker
        self.known: dict[str, str] = {}

    def real(self, run_id: str) -> str:
        if not is_offline(run_id):
            return run_id
        if run_id not in self.known:
            self.known[run_id] = self._find(run_id)
        return self.known[run_id]

    def _find(self, run_id: str) -> str:
        client, experiment_id = self.tracker.client, self.tracker.experiment_id()
        head, sep, number = run_id.rpartition(_TRIAL_SEP)
        if not sep:  # offline:<study>
            parents = runs.find_parents(client, experiment_id, run_id.removeprefix(OFFLINE_PREFIX))
            if parents:
                return parents[0].info.run_id
        else:  # offline:<parent>:trial:<n>, the parent offline:<study> or offline:<run id>
            parent = head.removeprefix(OFFLINE_PREFIX) if _is_run_id(head) else head
            found = runs.find_children(client, experiment_id, self.real(parent), int(number))
            if found:
                return found[-1].info.run_id
        raise TrackingError(f"{run_id}: no MLflow run found for it (was its start replayed?)")


def _is_run_id(offline_id: str) -> bool:
    rest = offline_id.removeprefix(OFFLINE_PREFIX)
    return len(rest) == 32 and all(c in "0123456789abcdef" for c in rest)


def _apply(tracker: Any, ids: _Ids, e: Mapping[str, Any]) -> None:
    kind = e["event"]
    if kind == "study_start":
        ids.known[e["run_id"]] = tracker.start_study(e["study"], e["config_yaml"], e["tags"], e["params"])
    elif kind == "trial_begin":
        ids.known[e["run_id"]] = tracker.begin_trial(ids.real(e["parent_run_id"]), e["trial_number"], e["params"],
                                                     e["config_yaml"], e["extra_tags"])
    elif kind == "trial_end":
        tracker.end_trial(ids.real(e["run_id"]), _floats(e["metrics"]), RunState(e["state"]), e["reason"],
                          e["latency_rows"], e["tags"])
    elif kind == "stale_running":
        tracker.mark_stale_running(ids.real(e["parent_run_id"]), e["alive_trial_numbers"])
    elif kind == "study_artifacts":
        files = [Path(f) for f in e["files"] if Path(f).exists()]
        history = {k: [(int(s), float(v)) for s, v in points] for k, points in e.get("history", {}).items()}
        tracker.log_study_artifacts(ids.real(e["run_id"]), files, _floats(e["metrics"]), e["tags"], history)
    elif kind == "study_finish":
        tracker.finish_study(ids.real(e["run_id"]), RunState(e["state"]))


def resend(path: Path, tracker: Any) -> Resent:
    """Write the lines of `path` not yet replayed through `tracker` (which must raise, not fall back). Stops at
    the first that fails (TrackingError), counting those written before it."""
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    start = lines_resent(path)
    ids = _Ids(tracker)
    for number, line in enumerate(lines[start:], start=start + 1):
        _apply(tracker, ids, json.loads(line))
        _done_path(path).write_text(str(number))
    return Resent(len(lines) - start, ids.known)
