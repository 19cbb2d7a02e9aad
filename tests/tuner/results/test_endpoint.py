"""`python -m tuner +traffic=... replay.target=URL tuner.n_trials=1`: a running server measured as deployed."""

from __future__ import annotations

import pytest

from runtime import EngineConfig
from tests.runtime.serve.server_factories import running_server
from tests.tuner.cli import ROOT, mlflow_runs, run_tuner, tuner_args
from tests.tuner.tuner_factories import tiny_runtime

SAMPLE = ROOT / "tuner" / "data" / "sample.jsonl"


@pytest.fixture(scope="module")
def served():
    config = EngineConfig.from_mapping(tiny_runtime(scheduler={"max_model_len": 1024}))
    with running_server(config) as s:
        yield s


def test_the_tuner_measures_a_running_server_once(served, tmp_path):
    args = tuner_args(tmp_path, SAMPLE, f"replay.target={served.base_url}", "tuner.objective=goodput",
                      "validation.holdout_fraction=0", study="ep", trials=1)
    done = run_tuner(args, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert f"endpoint: tiny at {served.base_url}: its own config, measured once on 12 requests" in out
    assert "endpoint: goodput " in out and ", attainment 1.000," in out
    folder = tmp_path / "out-ep"
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == ["pagetune.log", "report.md"]
    report = (folder / "report.md").read_text()
    assert f"- **Where**: OpenAI-compatible server {served.base_url}, serving `tiny`" in report
    assert "| SLO attainment | 1 |" in report
    _, parents, children = mlflow_runs(tmp_path, "ep")
    assert len(parents) == len(children) == 1
    assert children[0].data.metrics["slo_attainment"] == 1.0
    assert children[0].data.tags["pagetune.trial_status"] == "ok"


def test_a_target_with_more_trials_is_refused_naming_the_key(tmp_path):
    args = tuner_args(tmp_path, SAMPLE, "replay.target=http://127.0.0.1:9/v1", study="ep2", trials=3)
    done = run_tuner(args, tmp_path)
    assert done.returncode == 2
    assert "error: tuner.n_trials: replay.target measures the server's own config, once: set tuner.n_trials=1, " \
           "got 3" in done.stderr


def test_an_unreachable_target_is_refused_before_any_request(tmp_path):
    args = tuner_args(tmp_path, SAMPLE, "replay.target=http://127.0.0.1:9/v1", study="ep3", trials=1)
    done = run_tuner(args, tmp_path)
    assert done.returncode == 2
    assert "error: replay.target http://127.0.0.1:9/v1: GET /models failed (ConnectError" in done.stderr
