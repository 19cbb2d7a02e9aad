"""What pagetune records about a study and its trials, independent of where it is recorded.

Pure functions: they turn a trial's params, metrics and latencies into the strings, floats and CSV
text that MLflow (or the JSONL fallback) stores. Every string that could hold a URL is masked here.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any, NamedTuple

from tuner.redact import mask_text
from tuner.rounding import rounded

# Tag keys: the study and trial identity that lets any worker find the runs again.
TAG_STUDY = "pagetune.study"
TAG_ROLE = "pagetune.role"  # "study" on the parent, "trial" on each child
TAG_TRIAL = "pagetune.trial_number"
TAG_REASON = "pagetune.failure_reason"
TAG_STOP_REASON = "pagetune.stop_reason"  # a trial stopped early on purpose (pruned): FINISHED, not failed
TAG_SKIPPED = "pagetune.skipped_metrics"
TAG_TRUNCATED = "pagetune.truncated_params"
TAG_PARENT = "mlflow.parentRunId"  # MLflow's own key: the UI nests children under the parent with it
STATUS_TAG = "pagetune.trial_status"  # ok | infeasible | pruned | error | oom | timeout | died, on each child run
TAG_NOTE = "mlflow.note.content"  # MLflow's own key: the run's description (markdown) on its page
ROLE_STUDY = "study"
ROLE_TRIAL = "trial"

CONFIG_ARTIFACT = "config.yaml"
LATENCY_ARTIFACT = "latencies.csv"
REASON_ARTIFACT = "failure.txt"
WORKER_DIED = "worker died"

MAX_PARAM_CHARS = 500
MAX_TAG_CHARS = 5000  # MLflow allows 8000; the full text of a long reason goes to failure.txt
MAX_NOTE_CHARS = 8000  # a description is a tag too; MLflow's limit
_ELLIPSIS = "..."


MLFLOW_UI = "http://127.0.0.1:5000"  # where `mlflow ui` serves by default


def review_link(experiment_id: str, run_id: str, ui: str = MLFLOW_UI) -> str:
    """The run's page in MLflow's model-training view (runs, metrics, charts). MLflow 3.17's UI picks GenAI or
    model training from its `workflowType` setting (GenAI by default), not from the experiment's kind tag; the
    query names it, and the UI keeps it on every link from there."""
    return f"{ui}/#/experiments/{experiment_id}/runs/{run_id}?workflowType=machine_learning"


class TrackingError(RuntimeError):
    """The tracking store is unreachable or refused a write; the message holds only masked URIs."""


class RunState(str, Enum):
    """How a run ends. Never RUNNING: pagetune always closes what it opens."""

    FINISHED = "FINISHED"
    FAILED = "FAILED"
    KILLED = "KILLED"


class OnUnreachable(str, Enum):
    """What to do when the tracking store cannot be reached."""

    FAIL = "fail"  # raise TrackingError before any trial runs
    CONTINUE = "continue"  # warn, record nothing in MLflow, write every payload to a JSONL file


class Metrics(NamedTuple):
    finite: dict[str, float]
    skipped: tuple[str, ...]  # names whose values were NaN or infinite, sorted


class Params(NamedTuple):
    values: dict[str, str]
    truncated: tuple[str, ...]  # names whose values were cut to MAX_PARAM_CHARS, sorted


def truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - len(_ELLIPSIS)] + _ELLIPSIS


def stringify(value: Any) -> str:
    """A param value as text: strings as they are, everything else as JSON (`true`, `null`, `[1, 2]`), floats
    rounded (`rounded`)."""
    if isinstance(value, str):
        return value
    if isinstance(value, Enum):
        return str(value.value)
    try:
        return json.dumps(rounded(value), sort_keys=True)
    except (TypeError, ValueError):
        return str(value)


def params_to_strings(params: Mapping[str, Any]) -> Params:
    values: dict[str, str] = {}
    truncated: list[str] = []
    for key, value in params.items():
        text = mask_text(stringify(value))
        if len(text) > MAX_PARAM_CHARS:
            truncated.append(key)
        values[key] = truncate(text, MAX_PARAM_CHARS)
    return Params(values, tuple(sorted(truncated)))


def split_metrics(metrics: Mapping[str, float]) -> Metrics:
    finite: dict[str, float] = {}
    skipped: list[str] = []
    for key, value in metrics.items():
        number = float(value)
        if math.isfinite(number):
            finite[key] = number
        else:
            skipped.append(key)
    return Metrics(finite, tuple(sorted(skipped)))


def tags_to_strings(tags: Mapping[str, Any]) -> dict[str, str]:
    return {key: truncate(mask_text(stringify(value)), MAX_NOTE_CHARS if key == TAG_NOTE else MAX_TAG_CHARS)
            for key, value in tags.items()}


def latency_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """Rows as CSV; the columns are every key in order of first appearance, missing cells empty."""
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def json_safe(value: Any) -> Any:
    """A masked value strict JSON can hold: non-finite floats become "nan"/"inf"/"-inf", never lost."""
    if isinstance(value, Enum):
        return json_safe(value.value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (int, float, bool)):
        return value
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return mask_text(str(value))


class TrialLogging:
    """`log_trial` = `begin_trial` + `end_trial`, shared by the MLflow tracker and its fallback."""

    def log_trial(self, parent_run_id: str, trial_number: int, params: Mapping[str, Any],
                  metrics: Mapping[str, float], state: RunState | str, reason: str | None,
                  config_yaml: str, latency_rows: Sequence[Mapping[str, Any]],
                  extra_tags: Mapping[str, Any]) -> str:
        """Record one finished trial as one closed child run; returns its run id."""
        run_id = self.begin_trial(parent_run_id, trial_number, params, config_yaml, extra_tags)  # type: ignore[attr-defined]
        self.end_trial(run_id, metrics, state, reason, latency_rows)  # type: ignore[attr-defined]
        return run_id
