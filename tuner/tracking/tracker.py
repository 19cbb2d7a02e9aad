"""MLflow tracking of a study: one parent run per study, one child run per trial.

Call order: ``check()`` once before any trial (with ``on_unreachable=continue`` an unreachable store
starts an outage: payloads go to the :class:`FallbackTracker` file, `tracking.outage`), then
``start_study``; per trial either ``log_trial`` or ``begin_trial`` ... ``end_trial``; after a worker
died, ``mark_stale_running``; at the end ``log_study_artifacts`` and ``finish_study``.

Idempotent by design, because studies resume and several workers share one study:
- the parent is found by its ``pagetune.study`` tag; concurrent creators converge on the oldest;
- a trial's child is found by its ``pagetune.trial_number`` tag and replaced on a retry;
- every run ends FINISHED (a pruned trial too, its reason as its description), FAILED or KILLED (interrupted),
  never RUNNING.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from mlflow import MlflowClient
from mlflow.entities import Run
from mlflow.exceptions import MlflowException
from sqlalchemy.exc import SQLAlchemyError

from tuner.config import TrackingConfig
from tuner.redact import describe_error, mask_text, mask_url
from tuner.store.locking import store_lock
from tuner.store.retry import Outages, StorageUnavailable
from tuner.tracking import runs
from tuner.tracking.fallback import FallbackTracker, is_offline
from tuner.tracking.outage import Outage, limit_http_retries
from tuner.tracking.payloads import (
    CONFIG_ARTIFACT,
    LATENCY_ARTIFACT,
    ROLE_STUDY,
    ROLE_TRIAL,
    TAG_NOTE,
    TAG_PARENT,
    TAG_ROLE,
    TAG_STOP_REASON,
    TAG_STUDY,
    TAG_TRIAL,
    TAG_TRUNCATED,
    WORKER_DIED,
    OnUnreachable,
    RunState,
    TrackingError,
    TrialLogging,
    latency_csv,
    params_to_strings,
    tags_to_strings,
)
from tuner.tracking.probe import probe
from tuner.tracking.resend import Resent, resend

__all__ = ["Tracker"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_STORE_ERRORS = (MlflowException, SQLAlchemyError, OSError)
# A parent is trusted once it is this much older than now: a concurrent creator's run, stamped
# earlier but committed later, would have to take longer than this to appear (see start_study).
PARENT_SETTLE_S = 1.0


class Tracker(TrialLogging):
    """Logs a study to the MLflow store at ``uri`` under ``experiment``.

    ``fallback_path`` receives the JSONL payloads when the store is unreachable and
    ``on_unreachable`` is ``continue``; ``artifact_location`` is used only when the experiment is
    created (None: MLflow's default for the store).
    """

    def __init__(self, uri: str, experiment: str, on_unreachable: OnUnreachable | str = OnUnreachable.FAIL,
                 *, fallback_path: Path | str = Path("tracking-fallback.jsonl"),
                 artifact_location: str | None = None, probe_timeout_s: float = 3.0, retry_s: float = 0.0) -> None:
        if not experiment:
            raise ValueError("tracking.experiment must be a non-empty name")
        self.uri = uri
        self.experiment = experiment
        self.on_unreachable = OnUnreachable(on_unreachable)
        self.fallback_path = Path(fallback_path)
        self.artifact_location = artifact_location
        self.probe_timeout_s = probe_timeout_s
        self._experiment_id: str | None = None  # resolved once, by check() or the first write
        self._outage = Outage(uri, self.fallback_path)  # the store away mid-study (on_unreachable=continue)
        self._ids: dict[str, str] = {}  # run ids handed out while it was away -> their MLflow ids, once replayed
        # A database store (PostgreSQL restarted) is retried like the study's storage, up to storage.retry_s.
        self._retry = Outages(uri, retry_s, what="MLflow tracking store")
        limit_http_retries(uri)

    @functools.cached_property
    def _client(self) -> MlflowClient:
        # Built on first use, after check()'s probe: MlflowClient opens a database store at once,
        # and MLflow retries an unreachable database for minutes. Runs end through runs.terminate,
        # which prints no URL (the URI may carry a password).
        return MlflowClient(tracking_uri=self.uri)

    @property
    def client(self) -> MlflowClient:
        return self._client

    def experiment_id(self) -> str:
        return self._experiment()

    @property
    def masked_uri(self) -> str:
        return mask_url(self.uri)

    # ---- reachability -------------------------------------------------------------------------

    def check(self) -> Tracker:
        """Fail fast, before any trial, if the store cannot be reached (or, by option, start in an outage:
        payloads to the fallback file, replayed into MLflow if the store appears during the study)."""
        result = probe(self.uri, self.probe_timeout_s)
        detail = result.detail
        if result.reachable:
            try:
                self._experiment()
                return self
            except _STORE_ERRORS as err:
                detail = describe_error(err)
        message = f"MLflow tracking store {self.masked_uri} is unreachable ({detail})"
        if self.on_unreachable is OnUnreachable.FAIL:
            raise TrackingError(f"{message}; start it, fix tracking.uri, or set "
                                "tracking.on_unreachable=continue to run without MLflow")
        logger.warning("%s. TRACKING IS DISABLED for this run: nothing goes to MLflow; every trial "
                       "payload is appended to %s instead (and replayed into MLflow if the store comes back).",
                       message, self.fallback_path)
        self._outage.begin(message, said=True)
        return self

    @property
    def enabled(self) -> bool:
        """Whether payloads go to MLflow now (not to the fallback file)."""
        return not self._outage.active

    def _experiment(self) -> str:
        if self._experiment_id is None:
            self._experiment_id = runs.get_or_create_experiment(self._client, self.experiment,
                                                                 self.artifact_location)
        return self._experiment_id

    def _online(self, run_id: str) -> str:
        """The MLflow id of `run_id` (one handed out while the store was away, once replayed); while the
        store is away, look whether it is back first."""
        self._look_if_back()
        return self._ids.get(run_id, run_id)

    def _look_if_back(self) -> None:
        """While the store is away, at most every few seconds: when a probe passes, replay the fallback."""
        if self._outage.due() and (done := self._resend_if_back()) is not None:
            self._ids.update(done.ids)
            self._retry.reset()
            self._outage.end(done.written)

    def _resend_if_back(self) -> Resent | None:
        """Once a short probe passes, the fallback file re-sent through a tracker of the same store that fails
        rather than falls back; None while the store is still away (or away again: the next look goes on from
        the first record not written)."""
        if not probe(self.uri, self.probe_timeout_s).reachable:
            return None
        resender = Tracker(self.uri, self.experiment, OnUnreachable.FAIL, artifact_location=self.artifact_location)
        try:
            return resend(self.fallback_path, resender)
        except TrackingError:
            return None

    def _guard(self, action: Callable[[], T], offline: Callable[[FallbackTracker], T], *run_ids: str) -> T:
        """Run a store write; on a store error raise (fail) or, from then on until the store is back, send
        every payload to the fallback file (said once). A run handed out offline stays offline."""
        if self._outage.active or any(is_offline(r) for r in run_ids):
            return offline(self._outage.fallback)
        try:
            return self._retry.call(action)
        except (*_STORE_ERRORS, StorageUnavailable) as err:
            message = f"writing to MLflow tracking store {self.masked_uri} failed ({describe_error(err)})"
            if self.on_unreachable is OnUnreachable.FAIL:
                raise TrackingError(message) from None  # the chained error could show the raw URI
            self._outage.begin(message)
            return offline(self._outage.fallback)

    # ---- study --------------------------------------------------------------------------------

    def start_study(self, study_name: str, config_yaml: str, tags: Mapping[str, Any],
                    params: Mapping[str, Any] | None = None) -> str:
        """The id of the study's one parent run, found (resume, other workers) or created with `params`
        (what the study measures: they never change for a study, so a resume finds them already there)."""
        self._look_if_back()
        return self._guard(lambda: self._start_study(study_name, config_yaml, tags, params or {}),
                           lambda fb: fb.start_study(study_name, config_yaml, tags, params))

    def _start_study(self, study_name: str, config_yaml: str, tags: Mapping[str, Any],
                     params: Mapping[str, Any]) -> str:
        experiment_id = self._experiment()
        parent = self._settled_parent(experiment_id, study_name)
        if parent is not None:
            if parent.info.status != "RUNNING":  # a resumed study is running again
                self._client.update_run(parent.info.run_id, status="RUNNING")
            return parent.info.run_id
        all_tags = {**tags_to_strings(tags), TAG_STUDY: study_name, TAG_ROLE: ROLE_STUDY}
        mine = self._client.create_run(experiment_id, tags=all_tags, run_name=study_name).info.run_id
        winner = self._settled_parent(experiment_id, study_name)
        if winner is None or winner.info.run_id == mine:
            self._client.log_text(mine, mask_text(config_yaml), CONFIG_ARTIFACT)
            runs.log_params(self._client, mine, params_to_strings(params).values)
            return mine
        runs.discard(self._client, mine)  # a concurrent worker's parent is older: use it
        return winner.info.run_id

    def _settled_parent(self, experiment_id: str, study_name: str) -> Run | None:
        """The oldest parent of the study, once it is old enough that no older one can still appear.

        Creators stamp start_time before their insert commits, so a run stamped earlier may become
        visible later. Waiting until the oldest visible parent is PARENT_SETTLE_S old and searching
        again makes every worker pick the same run unless an insert takes longer than that.
        """
        while True:
            parents = runs.find_parents(self._client, experiment_id, study_name)
            if not parents:
                return None
            wait_s = parents[0].info.start_time / 1000 + PARENT_SETTLE_S - time.time()
            if wait_s <= 0:
                return parents[0]
            time.sleep(wait_s)

    def log_study_artifacts(self, parent_run_id: str, files: Sequence[Path], metrics: Mapping[str, float],
                            tags: Mapping[str, str] | None = None,
                            history: Mapping[str, Sequence[tuple[int, float]]] | None = None) -> None:
        """Attach study-level files (plots, report), metrics, tags (the verdict, the description) and per-trial
        histories (name -> (trial number, value): MLflow charts them by step) to the parent run."""
        parent_run_id = self._online(parent_run_id)
        self._guard(lambda: self._log_study_artifacts(parent_run_id, files, metrics, tags or {}, history or {}),
                    lambda fb: fb.log_study_artifacts(parent_run_id, files, metrics, tags, history), parent_run_id)

    def _log_study_artifacts(self, parent_run_id: str, files: Sequence[Path], metrics: Mapping[str, float],
                             tags: Mapping[str, str], history: Mapping[str, Sequence[tuple[int, float]]]) -> None:
        for path in files:
            self._client.log_artifact(parent_run_id, str(path))
        runs.log_metrics(self._client, parent_run_id, metrics)
        runs.log_history(self._client, parent_run_id, history)
        if tags:
            runs.log_tags(self._client, parent_run_id, tags_to_strings(tags))

    def finish_study(self, parent_run_id: str, state: RunState | str = RunState.FINISHED) -> None:
        state = RunState(state)
        parent_run_id = self._online(parent_run_id)
        self._guard(lambda: runs.terminate(self._client, parent_run_id, state),
                    lambda fb: fb.finish_study(parent_run_id, state), parent_run_id)

    # ---- trials -------------------------------------------------------------------------------


    def begin_trial(self, parent_run_id: str, trial_number: int, params: Mapping[str, Any],
                    config_yaml: str, extra_tags: Mapping[str, Any]) -> str:
        """Open the trial's child run (RUNNING), replacing any earlier run of the same trial number."""
        parent_run_id = self._online(parent_run_id)
        return self._guard(
            lambda: self._begin_trial(parent_run_id, trial_number, params, config_yaml, extra_tags),
            lambda fb: fb.begin_trial(parent_run_id, trial_number, params, config_yaml, extra_tags), parent_run_id)

    def _begin_trial(self, parent_run_id: str, trial_number: int, params: Mapping[str, Any],
                     config_yaml: str, extra_tags: Mapping[str, Any]) -> str:
        parent = self._client.get_run(parent_run_id)
        experiment_id = parent.info.experiment_id
        study = parent.data.tags.get(TAG_STUDY, "")
        # A retry after a crash or a resume: the new attempt replaces the old run (params in MLflow
        # are immutable, and stale artifacts such as failure.txt must not survive a success).
        for old in runs.find_children(self._client, experiment_id, parent_run_id, trial_number):
            runs.discard(self._client, old.info.run_id)
        tags = {**tags_to_strings(extra_tags), TAG_PARENT: parent_run_id, TAG_STUDY: study,
                TAG_ROLE: ROLE_TRIAL, TAG_TRIAL: str(int(trial_number))}
        run_id = self._client.create_run(experiment_id, tags=tags, run_name=f"trial-{trial_number}").info.run_id
        try:
            strings = params_to_strings(params)
            runs.log_params(self._client, run_id, strings.values)
            if strings.truncated:
                runs.log_tags(self._client, run_id, {TAG_TRUNCATED: ",".join(strings.truncated)})
            self._client.log_text(run_id, mask_text(config_yaml), CONFIG_ARTIFACT)
        except _STORE_ERRORS:
            # The payload goes to the fallback (or the error up); this half-written run must not
            # stay RUNNING.
            with contextlib.suppress(*_STORE_ERRORS):
                runs.terminate(self._client, run_id, RunState.FAILED)
            raise
        return run_id

    def end_trial(self, run_id: str, metrics: Mapping[str, float], state: RunState | str,
                  reason: str | None, latency_rows: Sequence[Mapping[str, Any]],
                  tags: Mapping[str, Any] | None = None) -> None:
        """Log the trial's results (and `tags`, e.g. its status) and close its run in ``state``."""
        state = RunState(state)
        run_id = self._online(run_id)
        self._guard(lambda: self._end_trial(run_id, metrics, state, reason, latency_rows, tags or {}),
                    lambda fb: fb.end_trial(run_id, metrics, state, reason, latency_rows, tags), run_id)

    def _end_trial(self, run_id: str, metrics: Mapping[str, float], state: RunState, reason: str | None,
                   latency_rows: Sequence[Mapping[str, Any]], tags: Mapping[str, Any]) -> None:
        try:
            if tags:
                runs.log_tags(self._client, run_id, tags_to_strings(tags))
            runs.log_metrics(self._client, run_id, metrics)
            if latency_rows:
                self._client.log_text(run_id, latency_csv(latency_rows), LATENCY_ARTIFACT)
            if reason and state is RunState.FINISHED:  # stopped early on purpose (pruned): why, as its description
                runs.log_tags(self._client, run_id, tags_to_strings({TAG_STOP_REASON: reason,
                                                                     TAG_NOTE: f"Stopped early: {reason}"}))
            elif reason:
                runs.log_reason(self._client, run_id, reason)
        finally:
            # Close the run even when a write failed, so it never stays RUNNING.
            runs.terminate(self._client, run_id, state)

    def mark_stale_running(self, parent_run_id: str, alive_trial_numbers: Collection[int]) -> list[int]:
        """Close as FAILED ("worker died") every RUNNING child whose trial is not alive; their numbers."""
        parent_run_id = self._online(parent_run_id)
        return self._guard(lambda: self._mark_stale_running(parent_run_id, set(alive_trial_numbers)),
                           lambda fb: fb.mark_stale_running(parent_run_id, alive_trial_numbers), parent_run_id)

    def _mark_stale_running(self, parent_run_id: str, alive: set[int]) -> list[int]:
        experiment_id = self._client.get_run(parent_run_id).info.experiment_id
        closed: list[int] = []
        for run in runs.find_children(self._client, experiment_id, parent_run_id, running_only=True):
            number = int(run.data.tags[TAG_TRIAL])
            if number in alive:
                continue
            runs.log_reason(self._client, run.info.run_id, WORKER_DIED)
            runs.terminate(self._client, run.info.run_id, RunState.FAILED)
            closed.append(number)
        return sorted(closed)


def open_tracker(tracking: TrackingConfig, retry_s: float, out_dir: Path) -> Tracker | FallbackTracker:
    """The study's tracker, its store checked (under a lock: workers starting together on a fresh store);
    the fallback file in `out_dir`; the store retried through an outage of `retry_s` (storage.retry_s).
    Raises TrackingError when the store is unreachable and must be."""
    with store_lock(tracking.uri, "mlflow-tables"):
        return Tracker(tracking.uri, tracking.experiment, tracking.on_unreachable,
                       fallback_path=out_dir / "tracking-fallback.jsonl", retry_s=retry_s).check()
