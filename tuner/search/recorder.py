"""A trial's MLflow child run, as the objective records it: opened with the trial's knobs and config, ended with
its metrics, state, reason and latency rows (or KILLED when a signal stopped it). One recorder per study run:
it holds the tracker and the parent run the children hang under.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from runtime import EngineConfig
from tuner.measure.job import TrialOutcome, TrialStatus
from tuner.store.record import INTERRUPTED
from tuner.tracking import STATUS_TAG, RunState

__all__ = ["FAILED", "TrialRecorder"]

FAILED = (TrialStatus.error, TrialStatus.oom, TrialStatus.timeout, TrialStatus.died)


@dataclass(frozen=True)
class TrialRecorder:
    tracker: Any  # Tracker | FallbackTracker
    parent_run_id: str
    figures: str = "measured"  # what the trials' figures are (simulated: from which profile), tagged on each run

    def begin(self, number: int, values: dict[str, Any], config: EngineConfig, baseline: bool) -> str:
        """The trial's child run, opened; its id."""
        config_yaml = yaml.safe_dump({"runtime": config.to_dict(), "knobs": values}, sort_keys=False)
        return self.tracker.begin_trial(self.parent_run_id, number, values, config_yaml,
                                        {"pagetune.baseline": str(baseline).lower(), "pagetune.figures": self.figures})

    def end(self, run_id: str, outcome: TrialOutcome, metrics: dict[str, float]) -> None:
        self.tracker.end_trial(run_id, metrics, _run_state(outcome.status), outcome.reason,
                               list(outcome.measurement.latency_rows) if outcome.measurement else [],
                               {STATUS_TAG: outcome.status.value})

    def interrupted(self, run_id: str) -> None:
        self.tracker.end_trial(run_id, {}, RunState.KILLED, INTERRUPTED, [], {STATUS_TAG: INTERRUPTED})


def _run_state(status: TrialStatus) -> RunState:
    if status in FAILED:
        return RunState.FAILED
    return RunState.FINISHED  # a pruned trial too: it ran as planned and stopped (its reason tagged), not a crash
