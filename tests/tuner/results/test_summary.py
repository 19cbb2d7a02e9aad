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


def test_the_latency_cdf_names_the_rates_its_latencies_were_measured_at():
    from runtime import EngineConfig
    from tuner.results.conclude import Conclusion
    from tuner.results.finalists import Candidate, Remeasured
    from tuner.results.summary import _first_rates
    from tuner.results.verdict import verdict

    base, pick = (Candidate("baseline", 0, EngineConfig(), 10.0, {}), Candidate("trial 3", 3, EngineConfig(), 12.0, {}))
    proof = Remeasured("validation", {"trial 3": [12.25, 12.5], "baseline": [None, 10.0]}, {}, {}, [], {})
    c = Conclusion(base, [pick], proof, pick, proof, verdict(False, None, "req/s", "held-out"), "req/s")
    assert _first_rates(c) == " (pick 12.25 req/s, baseline 10 req/s)"  # the baseline's first round failed
    assert _first_rates(c._replace(pick=base)) == " (baseline 10 req/s)"
