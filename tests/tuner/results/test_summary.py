"""What the parent run charts: every trial by its number, pruned ones where they stopped."""

from __future__ import annotations

import optuna

from tuner.results.summary import study_history


def test_study_history_has_every_trial_by_number_and_pruned_ones_where_they_stopped():
    def objective(trial: optuna.Trial) -> float:
        trial.set_user_attr("metrics", {"ttft_p99_s": 0.5 + trial.number, "tpot_p99_s": 0.01})
        trial.report(10.0 + trial.number, 0)
        if trial.number == 1:
            raise optuna.TrialPruned()
        return 20.0 + trial.number

    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(objective, n_trials=3)
    assert study_history(study) == {
        "trial_value": [(0, 20.0), (2, 22.0)], "trial_value_pruned": [(1, 11.0)],
        "trial_ttft_p99_s": [(0, 0.5), (1, 1.5), (2, 2.5)], "trial_tpot_p99_s": [(0, 0.01), (1, 0.01), (2, 0.01)]}
