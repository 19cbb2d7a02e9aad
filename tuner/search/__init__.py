"""The search: the space of knobs, the Optuna study and its objective.

    space       SearchSpace: knobs from conf/search/ by dotted path; Optuna params -> EngineConfig, once
    identity    the study's fingerprint and default name; no resuming a study of other traffic
    samplers    Optuna sampler and pruner from config; IncumbentPruner (the only valid early stop)
    study       open_study (baseline enqueued once), run_search (the shared trial budget)
    objective   TrialRunner: one trial through the executor, recorded in Optuna and MLflow
"""
