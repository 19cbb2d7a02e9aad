"""The tuner as a measurement instrument, on an executor whose truth is known (tuner/testing.py): each
replay's capacity varies by 8% (lognormal sd 0.08, as measured on the CPU engine: 9.5% CV between
whole capacity measurements), everything above the executor is the real study, pruner, finalists and
interval. Seeded: every run of these tests draws the same numbers."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from tuner.search.samplers import CHECKPOINT_STEP, INCUMBENT_ATTR
from tuner.testing import FakeExecutor, run_fake_study

NOISE = 0.08
STUDIES = 50


@pytest.fixture(autouse=True)
def quiet_optuna():
    optuna.logging.set_verbosity(optuna.logging.ERROR)


def _studies(tmp_path, capacity_of):
    return [run_fake_study(tmp_path, FakeExecutor(capacity_of, NOISE, seed), seed) for seed in range(STUDIES)]


def test_aa_equal_configs_are_not_called_improved(tmp_path):
    """Every config truly the same: the verdict keeps the baseline in at least 95% of 50 studies."""
    results = _studies(tmp_path, lambda config: 10.0)
    improved = sum(c.verdict.improved for c, _ in results)
    assert improved <= STUDIES * 0.05, f"{improved} of {STUDIES} A/A studies called an improvement"
    for c, _ in results:
        if not c.verdict.improved:
            assert c.exported.label == "baseline"
            assert c.verdict.headline.startswith(("no significant improvement", "no improvement"))


def test_a_truly_better_config_is_picked_and_called_improved(tmp_path):
    """One knob value 20% better: picked, exported and called improved in at least 95% of 50 studies."""
    results = _studies(tmp_path, lambda config: 12.0 if config.cache.block_size == 32 else 10.0)
    found = sum(c.verdict.improved and c.exported.config.cache.block_size == 32 for c, _ in results)
    assert found >= STUDIES * 0.95, f"the better config was exported in {found} of {STUDIES} studies"
    intervals = [c.verdict.interval for c, _ in results if c.verdict.improved]
    covered = sum(i.low <= 2.0 <= i.high for i in intervals)  # the true difference: +2 req/s
    assert covered >= 0.9 * len(intervals), f"{covered} of {len(intervals)} 95% intervals cover the truth"


def test_pruning_fires_only_at_the_checkpoint_and_only_below_the_incumbent(tmp_path):
    _, study = run_fake_study(tmp_path, FakeExecutor(lambda c: 12.0 if c.cache.block_size == 32 else 10.0, NOISE, 7), 7)
    pruned = study.get_trials(states=(TrialState.PRUNED,))
    assert pruned, "this seed prunes some trials"
    for t in study.get_trials(deepcopy=False):
        assert set(t.intermediate_values) <= {CHECKPOINT_STEP}  # nothing reported before or after the checkpoint
    for t in pruned:
        assert t.intermediate_values[CHECKPOINT_STEP] < t.user_attrs[INCUMBENT_ATTR]
        assert t.user_attrs["metrics"]["partial_probes"] == 1.0  # stopped right after its first probe
    baseline = study.trials[0]
    assert baseline.user_attrs[INCUMBENT_ATTR] is None and baseline.state is TrialState.COMPLETE
