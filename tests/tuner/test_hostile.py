"""Hostile input: nothing from a config or a traffic file runs as code, and no credential leaks.

(a) The sources hold no hook that turns data into code (eval, pickle, unsafe YAML, Hydra's
instantiate, dynamic imports); `_target_`, `!!python/...` tags and `${oc.env:...}` in a runtime
YAML, a Hydra runtime group or a traffic line stay inert: an error naming the key, or plain text.
(b) A password in a tracking or storage URL never reaches stdout, stderr, a file pagetune writes
(Hydra's `.hydra/` record included) or an MLflow record: checked on `python -m tuner` failing fast
on an unreachable store, on a run that continues without tracking, and on the tracker itself
against a SQLite store and an HTTP store.
"""

from __future__ import annotations

import base64
import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import optuna
import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from mlflow import MlflowClient

from runtime import LLM
from runtime.config import ConfigError, EngineConfig
from tests.tuner.cli import ROOT, run_tuner, study_trials, tuner_args
from tuner.config import CONF_DIR
from tuner.redact import mask_url
from tuner.tracking import Tracker
from tuner.traffic import SAMPLE_TRAFFIC, TrafficError, load_traffic

SECRET = "s3cret"

# pattern -> why it is forbidden in runtime/ and tuner/ (kernels/ too: it is imported by both).
FORBIDDEN = {
    r"(?<![\w.])(eval|exec|compile)\(": "evaluates text as code",
    r"__import__\(|\bimport_module\(|spec_from_file_location|exec_module|SourceFileLoader":
        "imports a module named at run time",
    r"\b(c?pickle|marshal|shelve|dill|cloudpickle|jsonpickle)\b": "unpickling runs code",
    r"yaml\.(unsafe_load|full_load|load_all)\(|yaml\.load\((?!.*SafeLoader)|\b(Unsafe|Full)?Loader=yaml\.(Unsafe|Full)?Loader\b":
        "a YAML loader that builds Python objects",
    r"\binstantiate\(|hydra\.utils|\bget_(class|method|object)\(|_target_|_partial_":
        "Hydra builds objects named by config",
    r"register_new_resolver|register_resolver": "a custom OmegaConf resolver could run code",
    r"os\.(system|popen|exec\w*|spawn\w*)\(|shell\s*=\s*True": "a shell command",
    r"trust_remote_code\s*=\s*True": "runs Python code shipped with a checkpoint",
    r"torch\.load\((?!.*weights_only=True)": "torch.load unpickles unless weights_only=True",
}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _files_holding(folder: Path, needle: str) -> list[str]:
    """Every file under `folder` (text or binary: SQLite databases too) whose bytes contain `needle`."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()
                  and needle.encode() in p.read_bytes())


# ---- (a) nothing is evaluated or instantiated ---------------------------------------------------

def test_sources_hold_no_hook_that_runs_data_as_code():
    hits = []
    for package in ("runtime", "tuner", "kernels"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                hits += [f"{path.relative_to(ROOT)}:{number}: {why}: {line.strip()}"
                         for pattern, why in FORBIDDEN.items() if re.search(pattern, line)]
    assert hits == []


def test_the_patterns_catch_what_they_are_meant_to():
    caught = ["x = eval(text)", "exec(code)", "pickle.loads(b)", "yaml.load(f)", "yaml.load(f, Loader=yaml.Loader)",
              "hydra.utils.instantiate(cfg)", "importlib.import_module(name)", "os.system(cmd)", "torch.load(path)",
              "OmegaConf.register_new_resolver('x', f)", "AutoConfig.from_pretrained(p, trust_remote_code=True)"]
    allowed = ["model.eval()", "re.compile(p)", "yaml.safe_load(f)", "yaml.load(f, Loader=yaml.SafeLoader)",
               "torch.load(path, weights_only=True)", "subprocess.run(args)"]
    matches = lambda line: any(re.search(p, line) for p in FORBIDDEN)
    assert [line for line in caught if not matches(line)] == []
    assert [line for line in allowed if matches(line)] == []


def test_conf_tree_names_no_class_to_build():
    texts = {p.relative_to(CONF_DIR): p.read_text() for p in sorted(CONF_DIR.rglob("*.yaml"))}
    assert {Path("config.yaml"), Path("storage/postgres.yaml"), Path("runtime/default.yaml")} <= set(texts)
    hydra_keys = r"(?<![A-Za-z0-9_])_(target|partial|args)_\s*:|!!python"  # keys, not a knob named *_partial_*
    assert [str(p) for p, t in texts.items() if re.search(hydra_keys, t)] == []


def _tricks(marker: Path) -> dict[str, str]:
    """Runtime YAMLs that would create `marker` if anything in them ran."""
    command = f"touch {marker}"
    return {
        "target_at_top": f"_target_: os.system\n_args_: [{command!r}]\n",
        "target_in_section": f"cache:\n  _target_: os.system\n  command: {command!r}\n",
        "python_tag": f"cache:\n  block_size: !!python/object/apply:os.system [{command!r}]\n",
        "env_interpolation": "device: ${oc.env:HOME}\n",
    }


@pytest.mark.parametrize(("trick", "error", "message"), [
    ("target_at_top", ConfigError, "unknown key '_target_'"),
    ("target_in_section", ConfigError, "unknown key 'cache._target_'"),
    ("python_tag", yaml.YAMLError, "could not determine a constructor for the tag "
                                   "'tag:yaml.org,2002:python/object/apply:os.system'"),
    ("env_interpolation", ConfigError, "device: must be auto, cpu or cuda[:N], got '${oc.env:HOME}'"),
])
def test_runtime_yaml_tricks_are_inert(tmp_path, trick, error, message):
    marker = tmp_path / "ran"
    path = tmp_path / "best.yaml"
    path.write_text(_tricks(marker)[trick])
    for load in (EngineConfig.from_yaml, LLM.from_config):
        with pytest.raises(error) as err:
            load(path)
        assert str(err.value).splitlines()[0].startswith(message), str(err.value)
    assert not marker.exists()


def test_hydra_runtime_group_tricks_are_inert(tmp_path):
    """A runtime group file (`runtime=best` from another search path) is held to the same schema."""
    marker = tmp_path / "ran"
    group = tmp_path / "conf" / "runtime"
    group.mkdir(parents=True)
    for name, text in _tricks(marker).items():
        (group / f"{name}.yaml").write_text(text)

    def composed(name: str):
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose("config", overrides=[f"hydra.searchpath=[file://{tmp_path / 'conf'}]", f"runtime={name}"])

    for name, key in (("target_at_top", "runtime._target_"), ("target_in_section", "runtime.cache._target_")):
        with pytest.raises(ConfigCompositionException) as err:
            composed(name)
        assert f"full_key: {key}" in str(err.value), str(err.value)
    with pytest.raises(yaml.YAMLError):
        composed("python_tag")
    assert not marker.exists()


def test_traffic_tricks_are_inert(tmp_path):
    lines = ['{"timestamp": 0, "prompt_tokens": 8, "output_tokens": 4, "_target_": "os.system"}',
             '{"timestamp": 1, "prompt": "${oc.env:HOME} __import__(\'os\').system(\'id\')", "output_tokens": 4}']
    path = tmp_path / "logs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TrafficError, match=rf"^{re.escape(str(path))}:1: .*'_target_'"):
        load_traffic(path, vocab_size=512)
    seen: list[str] = []
    load = load_traffic(path, on_error="skip", vocab_size=512, tokenizer=lambda text: seen.append(text) or [5] * 3)
    assert (load.skipped_count, len(load.requests)) == (1, 1)
    assert seen == ["${oc.env:HOME} __import__('os').system('id')"]  # handed over as text, nothing resolved


# ---- (b) credentials are masked -----------------------------------------------------------------

def test_unreachable_tracking_fails_fast_and_masks_the_password(tmp_path):
    port = _closed_port()
    args = tuner_args(tmp_path, SAMPLE_TRAFFIC, f"tracking.uri=http://alice:{SECRET}@127.0.0.1:{port}")
    start = time.monotonic()
    result = run_tuner(args, cwd=tmp_path, timeout=120)
    elapsed = time.monotonic() - start
    assert result.returncode == 2, result.stderr[-2000:]
    error = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert error == [f"error: MLflow tracking store http://alice:***@127.0.0.1:{port} is unreachable "
                     f"(GET http://127.0.0.1:{port}/health: [Errno 111] Connection refused); start it, fix "
                     "tracking.uri, or set tracking.on_unreachable=continue to run without MLflow"]
    assert result.stderr.strip().splitlines()[-1] == error[0]
    # MLflow's own retries would take minutes; the bound leaves a loaded host room for the interpreter and imports
    assert elapsed < 90, f"took {elapsed:.1f} s (interpreter start and imports are most of it)"
    assert not (tmp_path / "optuna.db").exists()  # stopped before the study was opened: no trial ran
    assert not (tmp_path / "out-t").exists()  # refused before any trial: no output folder (nor its record)
    assert SECRET not in result.stdout + result.stderr
    assert _files_holding(tmp_path, SECRET) == []


def test_unreachable_tracking_with_continue_keeps_every_trial_and_masks(tmp_path):
    port = _closed_port()
    args = tuner_args(tmp_path, SAMPLE_TRAFFIC, f"tracking.uri=http://alice:{SECRET}@127.0.0.1:{port}",
                      "tracking.on_unreachable=continue")
    result = run_tuner(args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "TRACKING IS DISABLED for this run" in result.stdout + result.stderr
    out = tmp_path / "out-t"
    events = [json.loads(line) for line in (out / "tracking-fallback.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["study_start", "trial_begin", "trial_end", "trial_begin", "trial_end",
                                            "study_artifacts", "study_finish"]
    start = events[0]
    assert start["tags"]["pagetune.storage"] == f"sqlite:///{tmp_path}/optuna.db"  # nothing to mask: unchanged
    assert f"uri: http://alice:***@127.0.0.1:{port}" in start["config_yaml"]
    ends = {int(e["run_id"].rsplit(":", 1)[1]): e for e in events if e["event"] == "trial_end"}
    trials = study_trials(tmp_path, "t")
    assert sorted(ends) == [t.number for t in trials] == [0, 1]
    for trial in trials:  # every result Optuna holds is in the fallback file, value for value
        if trial.state is optuna.trial.TrialState.COMPLETE and trial.user_attrs["status"] == "ok":
            assert ends[trial.number]["state"] == "FINISHED"
            assert ends[trial.number]["metrics"]["capacity_rps"] == trial.values[0]
            assert len(ends[trial.number]["latency_rows"]) > 0
        else:  # stopped at the incumbent's capacity, or infeasible: recorded all the same
            assert ends[trial.number]["state"] in ("KILLED", "FINISHED")
    assert SECRET not in result.stdout + result.stderr
    assert _files_holding(tmp_path, SECRET) == []


PG_URL = f"postgresql+psycopg://tuner:{SECRET}@db:5432/optuna?sslmode=require&password={SECRET}"
PG_MASKED = "postgresql+psycopg://tuner:***@db:5432/optuna?sslmode=require&password=***"


def test_mlflow_records_are_masked(tmp_path):
    """What app.run hands the tracker (a storage tag, the config YAML), a trial's params and reason."""
    assert (mask_url(PG_URL), mask_url(f"sqlite:///{tmp_path}/optuna.db")) == (PG_MASKED,
                                                                             f"sqlite:///{tmp_path}/optuna.db")
    tracker = Tracker(f"sqlite:///{tmp_path}/mlflow.db", "hostile", artifact_location=str(tmp_path / "art")).check()
    config = f"storage:\n  url: {PG_URL}\ntracking:\n  uri: https://bob:{SECRET}@mlflow.example\n"
    parent = tracker.start_study("s", config, {"pagetune.storage": PG_URL})
    child = tracker.log_trial(parent, 0, {"note": PG_URL}, {"goodput": 1.0}, "FAILED",
                              f"OperationalError: could not connect to {PG_URL}", config, [], {"dsn": PG_URL})
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    assert client.get_run(parent).data.tags["pagetune.storage"] == PG_MASKED
    run = client.get_run(child).data
    assert (run.params["note"], run.tags["dsn"]) == (PG_MASKED, PG_MASKED)
    assert run.tags["pagetune.failure_reason"] == f"OperationalError: could not connect to {PG_MASKED}"
    assert _files_holding(tmp_path, SECRET) == []
    assert len(list((tmp_path / "art").rglob("config.yaml"))) == 2


class _MlflowStub(BaseHTTPRequestHandler):
    """Just enough of MLflow's REST API for closing a run: runs/get and runs/update."""

    auth: list[str] = []

    def _answer(self) -> None:
        type(self).auth.append(self.headers.get("Authorization", ""))
        info = {"run_id": "a" * 32, "run_uuid": "a" * 32, "experiment_id": "1", "run_name": "trial-0",
                "status": "FINISHED", "start_time": 1, "end_time": 2, "lifecycle_stage": "active",
                "artifact_uri": "mlflow-artifacts:/1/a"}
        body = json.dumps({"run": {"info": info, "data": {}}, "run_info": info}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


def test_http_store_never_prints_the_password(capfd, monkeypatch):
    """MLflow prints a "View run ... at: <tracking URI>" link when a run ends: never with the password."""
    monkeypatch.delenv("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", raising=False)  # restored after the test
    server = HTTPServer(("127.0.0.1", 0), _MlflowStub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        tracker = Tracker(f"http://alice:{SECRET}@127.0.0.1:{server.server_port}", "e")
        tracker.end_trial("a" * 32, {}, "FINISHED", None, [])
    finally:
        server.shutdown()
        server.server_close()
    captured = capfd.readouterr()
    assert SECRET not in captured.out + captured.err
    basic = "Basic " + base64.b64encode(f"alice:{SECRET}".encode()).decode()
    assert _MlflowStub.auth and set(_MlflowStub.auth) == {basic}  # the credentials still reach the server
