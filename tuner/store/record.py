"""What the study records about a trial beyond its values, read back by the search and the results alike:
the baseline's mark, the status of a trial a signal stopped, feasibility (the status and the constraints).
"""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from tuner.measure.job import TrialStatus

__all__ = ["BASELINE_ATTR", "INTERRUPTED", "feasible", "is_baseline"]

BASELINE_ATTR = "pagetune.baseline"  # trial user attr: {knob name: value} of the baseline trial
INTERRUPTED = "interrupted"  # the `status` and `reason` user attrs of a trial a signal stopped


def is_baseline(trial: optuna.trial.BaseTrial) -> bool:
    """Whether `trial` is the enqueued baseline (the runtime defaults)."""
    return BASELINE_ATTR in trial.user_attrs


def feasible(t: optuna.trial.FrozenTrial) -> bool:
    ok = t.state is TrialState.COMPLETE and t.user_attrs.get("status") == TrialStatus.ok.value
    return ok and all(c <= 0 for c in t.constraints.values())
