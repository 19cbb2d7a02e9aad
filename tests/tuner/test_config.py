"""conf/ composes into validated frozen dataclasses; bad keys and values name the key."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from hydra.errors import ConfigCompositionException

from runtime import EngineConfig
from runtime.config import ModelConfig
from tuner.config import (
    AppConfig,
    ObjectiveName,
    OnError,
    PrunerName,
    QualityConfig,
    ReplayConfig,
    SamplerName,
    SloConfig,
    StorageBackend,
    StorageConfig,
    TrackingConfig,
    TrafficFormat,
    TunerConfig,
    TunerConfigError,
    ValidationConfig,
    load_app_config,
)
from tuner.search.samplers import IncumbentPruner, build_pruner, build_sampler
from tuner.store.retry import RetryingStorage
from tuner.store.storage import build_storage


@pytest.fixture
def traffic(tmp_path: Path) -> Path:
    path = tmp_path / "logs.jsonl"
    path.write_text('{"timestamp": 0.0, "prompt_tokens": 8, "output_tokens": 4}\n')
    return path


def test_defaults_match_the_dataclasses(compose, traffic):
    app = load_app_config(compose(f"+traffic={traffic}"))
    assert app.traffic == traffic
    assert app.traffic_format is TrafficFormat.auto
    assert app.runtime == EngineConfig()  # the defaults come from the dataclasses: conf/ holds none of them
    assert (app.slo, app.tuner, app.storage, app.tracking) == (SloConfig(), TunerConfig(), StorageConfig(),
                                                                TrackingConfig())
    assert (app.replay, app.validation, app.quality) == (ReplayConfig(), ValidationConfig(), QualityConfig())
    assert app.replay.on_error is OnError["raise"]
    assert app.storage.url == "sqlite:///optuna.db" and app.tracking.uri == "sqlite:///mlflow.db"
    assert len(app.search.params) == 19


@pytest.mark.parametrize("form", ["+traffic", "traffic"])
def test_traffic_with_and_without_plus(compose, traffic, form):
    assert load_app_config(compose(f"{form}={traffic}")).traffic == traffic


def test_missing_traffic_is_a_one_line_error_with_an_example(compose):
    with pytest.raises(TunerConfigError) as err:
        load_app_config(compose())
    assert str(err.value) == "traffic is not set: pass the request log, e.g. `python -m tuner +traffic=logs.jsonl`"


def test_traffic_file_must_exist(compose, tmp_path):
    with pytest.raises(TunerConfigError, match=r"^traffic: no such file: .*nope\.jsonl$"):
        load_app_config(compose(f"traffic={tmp_path / 'nope.jsonl'}"))


def test_interface_overrides(compose, traffic):
    cfg = compose(f"+traffic={traffic}", "model=tiny", "tuner.n_trials=3", "tuner.study_name=s1",
                  "storage.url=sqlite:///x.db", "tracking.uri=sqlite:///m.db", "replay.max_requests=50",
                  "replay.time_scale=0.5", "traffic_format=azure", "hydra.run.dir=out/here", with_hydra=True)
    assert cfg.hydra.run.dir == "out/here"
    app = load_app_config(cfg)
    assert (app.tuner.n_trials, app.tuner.study_name) == (3, "s1")
    assert (app.storage.url, app.tracking.uri) == ("sqlite:///x.db", "sqlite:///m.db")
    assert (app.replay.max_requests, app.replay.time_scale) == (50, 0.5)
    assert app.traffic_format is TrafficFormat.azure
    assert app.runtime.model == ModelConfig(name="tiny")


def test_model_group_sets_the_runtime_model(compose, traffic):
    app = load_app_config(compose(f"traffic={traffic}", "model=llama3-8b"))
    assert app.runtime.model == ModelConfig(name="llama-3-8b")
    assert app.runtime.cache.device_memory_gb is None  # a GPU run plans with the real device memory


def test_unknown_key_fails_at_compose_naming_it(compose):
    with pytest.raises(ConfigCompositionException) as err:
        compose("replay.max_request=5")
    assert "full_key: replay.max_request" in str(err.value.__cause__)
    assert str(err.value.__cause__).startswith("Key 'max_request' not in 'ReplayConfigSchema'")


@pytest.mark.parametrize(("override", "message"), [
    ("+replay.foo=1", "unknown key 'replay.foo'"),  # Hydra's `+` bypasses the schema
    ("+runtime.cache.blok_size=8", "unknown key 'runtime.cache.blok_size' (did you mean 'block_size'?)"),
])
def test_unknown_key_added_with_plus_fails_at_load(compose, traffic, override, message):
    cfg = compose(f"traffic={traffic}", override)
    with pytest.raises(TunerConfigError) as err:
        load_app_config(cfg)
    assert str(err.value) == message


@pytest.mark.parametrize(("override", "message"), [
    ("replay.max_requests=abc", "Value 'abc' of type 'str' could not be converted to Integer"),
    ("tuner.sampler=tpx", "Invalid value 'tpx', expected one of [tpe, gp, nsga2, random, qmc]"),
    ("runtime.cache.block_size=big", "Value 'big' of type 'str' could not be converted to Integer"),
])
def test_mistyped_value_fails_at_compose_naming_the_key(compose, override, message):
    with pytest.raises(ConfigCompositionException) as err:
        compose(override)
    cause = str(err.value.__cause__)
    assert cause.splitlines()[0] == message
    assert f"full_key: {override.split('=')[0]}" in cause


@pytest.mark.parametrize(("override", "message"), [
    ("runtime.cache.block_size=12", "runtime.cache.block_size: must be a power of two in [1, 256], got 12"),
    ("replay.time_scale=0", "replay.time_scale: must be > 0, got 0.0"),
    ("validation.holdout_fraction=1.0", "validation.holdout_fraction: must be in [0, 1), got 1.0"),
    ("replay.min_window_s=-1", "replay.min_window_s: must be >= 0 seconds and finite, got -1.0"),
    ("tuner.n_trials=0", "tuner.n_trials: must be >= 1, got 0"),
    ("tuner.capacity_tol=0", "tuner.capacity_tol: must be in [0.001, 1], got 0.0"),
    ("tuner.edge_checks=-1", "tuner.edge_checks: must be >= 0, got -1"),
    ("validation.proof_rounds=1", "validation.proof_rounds: must be >= 2 (an interval needs two), got 1"),
])
def test_bad_value_fails_at_load_naming_the_key(compose, traffic, override, message):
    with pytest.raises(TunerConfigError) as err:
        load_app_config(compose(f"traffic={traffic}", override))
    assert str(err.value) == message


def test_postgres_url_comes_from_the_environment(compose, traffic, monkeypatch):
    monkeypatch.setenv("PAGETUNE_PG_URL", "postgresql+psycopg://u:p@db/pagetune")
    app = load_app_config(compose(f"traffic={traffic}", "storage=postgres"))
    assert app.storage == StorageConfig(url="postgresql+psycopg://u:p@db/pagetune")
    monkeypatch.delenv("PAGETUNE_PG_URL")
    with pytest.raises(TunerConfigError, match=r"^storage\.url: .*PAGETUNE_PG_URL' not found"):
        load_app_config(compose(f"traffic={traffic}", "storage=postgres"))


def test_journal_storage(compose, traffic, tmp_path):
    app = load_app_config(compose(f"traffic={traffic}", "storage=journal",
                                  f"storage.url={tmp_path / 'journal.log'}"))
    assert app.storage.backend is StorageBackend.journal
    assert isinstance(build_storage(app.storage), optuna.storages.JournalStorage)


def test_rdb_storage(tmp_path):
    storage = build_storage(StorageConfig(url=f"sqlite:///{tmp_path / 'o.db'}"))
    assert isinstance(storage, RetryingStorage)  # every call retried through an outage (storage.retry_s)
    rdb = storage._heartbeat_backend
    assert isinstance(rdb, optuna.storages.RDBStorage) and rdb.engine_kwargs == {"pool_pre_ping": True}
    assert storage.outages.retry_s == 120.0


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")  # QMCSampler
@pytest.mark.parametrize(("name", "cls"), [
    (SamplerName.tpe, optuna.samplers.TPESampler), (SamplerName.gp, optuna.samplers.GPSampler),
    (SamplerName.nsga2, optuna.samplers.NSGAIISampler), (SamplerName.random, optuna.samplers.RandomSampler),
    (SamplerName.qmc, optuna.samplers.QMCSampler),
])
def test_build_sampler(name, cls):
    assert type(build_sampler(TunerConfig(sampler=name))) is cls


@pytest.mark.parametrize(("name", "cls"), [
    (PrunerName.incumbent, IncumbentPruner), (PrunerName.none, optuna.pruners.NopPruner),
])
def test_build_pruner(name, cls):
    assert type(build_pruner(TunerConfig(pruner=name))) is cls


def test_directions():
    assert TunerConfig().directions == ("maximize",)
    pareto = TunerConfig(objective=ObjectiveName.pareto)
    assert pareto.directions == ("maximize", "minimize")


def test_plain_mapping_input_and_enum_errors(traffic):
    app = load_app_config({"traffic": str(traffic), "tuner": {"sampler": "gp"}})
    assert app.tuner.sampler is SamplerName.gp and isinstance(app, AppConfig)
    with pytest.raises(TunerConfigError) as err:
        load_app_config({"traffic": str(traffic), "replay": {"on_error": "ignore"}})
    assert str(err.value) == "replay.on_error: expected one of ['raise', 'skip'], got 'ignore'"


def test_conf_holds_no_copy_of_a_default():
    """Every value written in conf/'s default groups differs from the dataclass default it overrides."""
    import yaml

    from tuner.config import CONF_DIR

    for group in ("runtime/default", "tuner/default", "slo/default", "storage/sqlite", "tracking/sqlite"):
        assert yaml.safe_load((CONF_DIR / f"{group}.yaml").read_text()) == {}, group
    assert set(yaml.safe_load((CONF_DIR / "config.yaml").read_text())) == {"defaults", "traffic", "hydra"}


@pytest.mark.parametrize(("args", "message"), [
    (["tuner.n_trial=6"], "tuner.n_trial=6: tuner.n_trial is not a pagetune setting; did you mean tuner.n_trials?"),
    (["+tuner.n_trial=6"], "+tuner.n_trial=6: tuner.n_trial is not a pagetune setting; did you mean tuner.n_trials?"),
    (["runtime.cache.blok_size=8"], "runtime.cache.blok_size=8: runtime.cache.blok_size is not a pagetune setting; "
                                    "did you mean runtime.cache.block_size?"),
    (["foo=1"], "foo=1: foo is not a pagetune setting; see `python -m tuner --cfg job` for every key"),
    (["+traffic=t.jsonl", "model=tiny", "executor=sim", "hydra.run.dir=x", "search.params.x.low=1",
      "runtime.cache.block_size=8", "--cfg", "job"], None),
])
def test_a_mistyped_command_line_key_names_the_key_meant(args, message):
    from tuner.config import CONF_DIR, AppConfig
    from tuner.schema import unknown_override

    assert unknown_override(args, AppConfig, {p.name for p in CONF_DIR.iterdir() if p.is_dir()}) == message


def test_python_m_tuner_stops_on_a_mistyped_key_before_hydra(tmp_path):
    import subprocess
    import sys

    from tests.tuner.cli import ROOT

    result = subprocess.run([sys.executable, "-m", "tuner", "+traffic=t.jsonl", "tuner.n_trial=6"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr == ("error: tuner.n_trial=6: tuner.n_trial is not a pagetune setting; did you mean "
                             "tuner.n_trials?\n")
