"""Optuna sampler and pruner from the tuner config: fixed tables from enum names, nothing instantiated
by name from user input.

Constraints are not passed as `constraints_func` (deprecated in Optuna 5): the objective calls
`trial.set_constraint(name, value)` and TPE, GP and NSGA-II read those values themselves.

Pruning. Under open-loop replay the head of a replay does not rank configs (the first requests to
finish meet any SLO), so nothing is pruned on partial replays. The one early stop that is valid is
`IncumbentPruner`: a capacity trial's first probe replays the whole window at the incumbent's
capacity (repeated, majority decided); the worker reports that probe as the trial's only
intermediate value, its capacity estimate, and the trial stops when the estimate is below the
incumbent it was probed at, i.e. the candidate failed the SLO where the incumbent holds it.
"""

from __future__ import annotations

import optuna
from optuna.pruners import BasePruner
from optuna.trial import FrozenTrial

from tuner.config import PrunerName, SamplerName, TunerConfig

__all__ = ["CHECKPOINT_STEP", "INCUMBENT_ATTR", "IncumbentPruner", "build_pruner", "build_sampler"]

CHECKPOINT_STEP = 0  # the step of the one intermediate value: the probe at the incumbent's capacity
INCUMBENT_ATTR = "pagetune.incumbent"  # trial user attr: the objective value the trial was first probed at

_SAMPLERS = {
    SamplerName.tpe: lambda t, seed: optuna.samplers.TPESampler(seed=seed, n_startup_trials=t.n_startup_trials),
    SamplerName.gp: lambda t, seed: optuna.samplers.GPSampler(seed=seed, n_startup_trials=t.n_startup_trials),
    SamplerName.nsga2: lambda t, seed: optuna.samplers.NSGAIISampler(seed=seed, population_size=t.population_size),
    SamplerName.random: lambda t, seed: optuna.samplers.RandomSampler(seed=seed),
    # scramble: without it a Sobol sequence ignores the seed.
    SamplerName.qmc: lambda t, seed: optuna.samplers.QMCSampler(seed=seed, scramble=True),
}


class IncumbentPruner(BasePruner):
    """Stop a trial whose checkpoint value is below the incumbent value it was probed at."""

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        value = trial.intermediate_values.get(CHECKPOINT_STEP)
        incumbent = trial.user_attrs.get(INCUMBENT_ATTR)
        return value is not None and incumbent is not None and value < incumbent


_PRUNERS = {
    PrunerName.incumbent: lambda t: IncumbentPruner(),
    PrunerName.none: lambda t: optuna.pruners.NopPruner(),
}


def build_sampler(cfg: TunerConfig, seed: int | None = None) -> optuna.samplers.BaseSampler:
    """The Optuna sampler named by `tuner.sampler`, seeded with `seed` (default `tuner.seed`)."""
    return _SAMPLERS[cfg.sampler](cfg, cfg.seed if seed is None else seed)


def build_pruner(cfg: TunerConfig) -> optuna.pruners.BasePruner:
    """The Optuna pruner named by `tuner.pruner`."""
    return _PRUNERS[cfg.pruner](cfg)
