"""Stale trials: a RUNNING trial whose worker died is failed and handed over (`on_stale`: Optuna's retry, the
MLflow run closed), before the budget is counted and while `run_search` waits for other workers' trials.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import optuna
from optuna.trial import TrialState

from tuner.store.heartbeat import JournalHeartbeat

__all__ = ["StaleTrials"]


@dataclass(frozen=True)
class StaleTrials:
    overdue_s: float  # a live trial is younger: tuner.trial_timeout_s + storage.grace_period_s
    heartbeat: JournalHeartbeat | None = None  # journal storage only: RDB storage beats by itself
    on_stale: Callable[[optuna.Study, optuna.trial.FrozenTrial], None] | None = None  # a dead worker's trial

    def __call__(self, study: optuna.Study) -> None:
        """Fail (and re-queue) trials whose worker died; RDB storage does it through its heartbeats."""
        if self.heartbeat is not None:
            self.heartbeat.fail_stale(study, None)
        else:
            optuna.storages.fail_stale_trials(study)
        self._fail_overdue(study)

    def _fail_overdue(self, study: optuna.Study) -> None:
        """A RUNNING trial older than a live one can be (its timeout and the grace period) has no worker, even
        one without a heartbeat to go stale (killed before its first beat): failed and handed over the same way."""
        bound = timedelta(seconds=self.overdue_s)
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if t.datetime_start is not None and datetime.now() - t.datetime_start > bound:
                study.tell(t.number, state=TrialState.FAIL, skip_if_finished=True)
                if self.on_stale is not None:
                    self.on_stale(study, t)
