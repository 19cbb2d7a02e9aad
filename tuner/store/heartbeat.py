"""Heartbeats for journal-file studies, which Optuna gives only to RDB storage.

While a trial runs, a thread stamps it (`pagetune.heartbeat`, unix seconds) every
`storage.heartbeat_interval_s`. At the start of each trial, a worker looks for RUNNING trials whose
last stamp (or start, if none) is older than `storage.grace_period_s`: their worker died. Under the
study lock each is failed and handed to the same stale-trial callback RDB storage uses (retry its
parameters, close its MLflow run). Workers of a journal study share one machine, so one clock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.store.locking import store_lock

HEARTBEAT_ATTR = "pagetune.heartbeat"


class JournalHeartbeat:
    def __init__(self, journal_path: str, interval_s: float, grace_s: float,
                 on_stale: Callable[[optuna.Study, FrozenTrial], None]) -> None:
        self.journal_path = journal_path
        self.interval_s = interval_s
        self.grace_s = grace_s
        self.on_stale = on_stale

    @contextmanager
    def beating(self, trial: optuna.trial.Trial) -> Iterator[None]:
        """Stamp `trial` now and every interval until the block ends."""
        stop = threading.Event()

        def beat() -> None:
            while True:
                trial.set_user_attr(HEARTBEAT_ATTR, time.time())
                if stop.wait(self.interval_s):
                    return

        thread = threading.Thread(target=beat, name=f"heartbeat-{trial.number}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def _last_sign_of_life(self, trial: FrozenTrial) -> float:
        stamp = trial.user_attrs.get(HEARTBEAT_ATTR)
        return stamp if stamp is not None else trial.datetime_start.timestamp()

    def fail_stale(self, study: optuna.Study, running: int | None = None) -> list[int]:
        """Fail and hand over every silent RUNNING trial but `running` (this worker's own); their numbers."""
        failed = []
        with store_lock(self.journal_path, f"stale:{study.study_name}"):
            now = time.time()
            for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                if trial.number != running and now - self._last_sign_of_life(trial) > self.grace_s:
                    study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)
                    self.on_stale(study, trial)
                    failed.append(trial.number)
        return failed
