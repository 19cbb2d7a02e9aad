"""Small MLflow store operations the tracker is built from: find runs by tag, write in batches, close.

All take an explicit ``MlflowClient`` and run id; none touches MLflow's global active run, so several
trials can be logged from one process and several processes can log to one store.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator, Mapping, Sequence

from mlflow import MlflowClient
from mlflow.entities import LifecycleStage, Metric, Param, Run, RunStatus, RunTag
from mlflow.exceptions import MlflowException

from tuner.redact import mask_text
from tuner.tracking.payloads import (
    REASON_ARTIFACT,
    ROLE_STUDY,
    ROLE_TRIAL,
    TAG_PARENT,
    TAG_REASON,
    TAG_ROLE,
    TAG_SKIPPED,
    TAG_STUDY,
    TAG_TRIAL,
    RunState,
    split_metrics,
    tags_to_strings,
)

logger = logging.getLogger(__name__)

# log_batch limits of MLflow's REST API (per request).
_PARAMS_PER_BATCH = 100
_TAGS_PER_BATCH = 100
_METRICS_PER_BATCH = 1000
_PAGE = 1000


# MLflow 3's UI opens an experiment on its GenAI overview unless the experiment says what it holds.
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}


def get_or_create_experiment(client: MlflowClient, name: str, artifact_location: str | None) -> str:
    """The experiment's id; created if missing (racing workers: the loser reads the winner's), marked as
    model development so the UI opens on its runs."""
    found = client.get_experiment_by_name(name)
    if found is None:
        try:
            return client.create_experiment(name, artifact_location, tags=EXPERIMENT_KIND)
        except MlflowException:
            found = client.get_experiment_by_name(name)
            if found is None:
                raise
    if found.lifecycle_stage == LifecycleStage.DELETED:
        logger.warning("MLflow experiment %r was deleted; restoring it", name)
        client.restore_experiment(found.experiment_id)
    return found.experiment_id


def search_all(client: MlflowClient, experiment_id: str, filter_string: str) -> Iterator[Run]:
    """Every active run matching ``filter_string``, across pages."""
    token: str | None = None
    while True:
        page = client.search_runs([experiment_id], filter_string, max_results=_PAGE, page_token=token)
        yield from page
        token = page.token
        if not token:
            return


def run_key(run: Run) -> tuple[int, str]:
    """The total order that picks one parent among concurrent duplicates: oldest, then smallest id."""
    return (run.info.start_time, run.info.run_id)


def find_parents(client: MlflowClient, experiment_id: str, study: str) -> list[Run]:
    """The active parent runs of ``study``, oldest first.

    Filtered on the role tag only and matched on the study in Python, so a study name needs no
    quoting inside MLflow's filter language.
    """
    runs = search_all(client, experiment_id, f"tags.`{TAG_ROLE}` = '{ROLE_STUDY}'")
    return sorted((r for r in runs if r.data.tags.get(TAG_STUDY) == study), key=run_key)


def find_children(client: MlflowClient, experiment_id: str, parent_run_id: str,
                  trial_number: int | None = None, running_only: bool = False) -> list[Run]:
    """Active trial runs under ``parent_run_id`` (run ids are hex, safe inside the filter)."""
    clauses = [f"tags.`{TAG_PARENT}` = '{parent_run_id}'", f"tags.`{TAG_ROLE}` = '{ROLE_TRIAL}'"]
    if trial_number is not None:
        clauses.append(f"tags.`{TAG_TRIAL}` = '{int(trial_number)}'")
    if running_only:
        clauses.append("attributes.status = 'RUNNING'")
    return sorted(search_all(client, experiment_id, " and ".join(clauses)), key=run_key)


def log_params(client: MlflowClient, run_id: str, params: Mapping[str, str]) -> None:
    items = [Param(k, v) for k, v in params.items()]
    for i in range(0, len(items), _PARAMS_PER_BATCH):
        client.log_batch(run_id, params=items[i : i + _PARAMS_PER_BATCH], synchronous=True)


def log_tags(client: MlflowClient, run_id: str, tags: Mapping[str, str]) -> None:
    items = [RunTag(k, v) for k, v in tags.items()]
    for i in range(0, len(items), _TAGS_PER_BATCH):
        client.log_batch(run_id, tags=items[i : i + _TAGS_PER_BATCH], synchronous=True)


def log_metrics(client: MlflowClient, run_id: str, metrics: Mapping[str, float]) -> None:
    """Finite metrics as values; the names of NaN or infinite ones in a tag (MLflow would plot junk)."""
    split = split_metrics(metrics)
    now_ms = int(time.time() * 1000)
    items = [Metric(k, v, now_ms, 0) for k, v in split.finite.items()]
    for i in range(0, len(items), _METRICS_PER_BATCH):
        client.log_batch(run_id, metrics=items[i : i + _METRICS_PER_BATCH], synchronous=True)
    if split.skipped:
        log_tags(client, run_id, {TAG_SKIPPED: ",".join(split.skipped)})


def log_history(client: MlflowClient, run_id: str, history: Mapping[str, Sequence[tuple[int, float]]]) -> None:
    """Each name's (step, value) points, finite ones only: MLflow draws them as a chart over steps."""
    now_ms = int(time.time() * 1000)
    items = [Metric(k, float(v), now_ms, int(step)) for k, points in history.items() for step, v in points
             if math.isfinite(v)]
    for i in range(0, len(items), _METRICS_PER_BATCH):
        client.log_batch(run_id, metrics=items[i : i + _METRICS_PER_BATCH], synchronous=True)


def log_reason(client: MlflowClient, run_id: str, reason: str) -> None:
    """The failure reason, short in a tag (searchable, shown in the run list) and whole in a file."""
    log_tags(client, run_id, tags_to_strings({TAG_REASON: reason}))
    client.log_text(run_id, mask_text(reason), REASON_ARTIFACT)


def terminate(client: MlflowClient, run_id: str, state: RunState) -> None:
    """End a run in `state`, with its end time.

    `MlflowClient.set_terminated` does the same and then, against an HTTP server, prints "View run ... at:
    <tracking URI>" on stdout: the URI's password included. MLflow's only switch for that line is a
    process-wide environment variable, so the run is ended through the client's store instead.
    """
    store = client._tracking_client.store
    store.update_run_info(run_id, run_status=RunStatus.from_string(state.value), end_time=int(time.time() * 1000),
                          run_name=None)


def discard(client: MlflowClient, run_id: str) -> None:
    """Close and soft-delete a run that lost a race or is being replaced (hidden from searches)."""
    terminate(client, run_id, RunState.KILLED)
    client.delete_run(run_id)
