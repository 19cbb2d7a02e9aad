"""The search: the space of knobs, the Optuna study and its objective.

    space       SearchSpace: knobs from conf/search/ by dotted path; Optuna params -> EngineConfig, once
    identity    the study's fingerprint and default name; no resuming a study of other traffic
    samplers    Optuna sampler and pruner from config; IncumbentPruner (the only valid early stop)
    study       open_study (baseline enqueued once), run_search (the shared trial budget)
    objective   Objective: one trial through the executor, recorded in Optuna (values, constraints, attrs)
    recorder    TrialRecorder: the trial's MLflow child run
    stale       StaleTrials: a dead worker's trial failed and handed over (run_search's callback)
"""
