"""A real `mlflow server` killed and restarted under a study (`tracking.on_unreachable=continue`).

The study goes on at full speed, says so once, keeps every payload in the fallback file, and the file is
replayed into MLflow: by the tracker when the server is back during the study, or by
`python -m tuner.tracking` after it. One server for the module (it takes seconds to start).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from mlflow import MlflowClient

from tests.tuner.cli import study_trials, tuner_args
from tuner.tracking import RunState, Tracker
from tuner.tracking.outage import HTTP_LIMITS
from tuner.traffic import SAMPLE_TRAFFIC

pytestmark = pytest.mark.slow


class MlflowServer:
    def __init__(self, folder) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.folder = folder
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> float:
        """Start it on the same port and store; seconds until it answers."""
        begin = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{self.folder}/mlflow.db",
             "--default-artifact-root", str(self.folder / "artifacts"), "--host", "127.0.0.1", "--port",
             str(self.port), "--workers", "1"], cwd=self.folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        while time.monotonic() - begin < 90:
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=1):
                    return time.monotonic() - begin
            except OSError:
                time.sleep(0.2)
        raise AssertionError("mlflow server did not start")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the server and its uvicorn worker: its own group
            self.proc.wait()
        self.proc = None

    @property
    def up(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    for key, value in HTTP_LIMITS.items():  # this process reads the store too: seconds, not minutes
        os.environ.setdefault(key, value)
    server = MlflowServer(tmp_path_factory.mktemp("mlflow-server"))
    server.start()
    yield server
    server.kill()


def _runs(uri: str, study: str):
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("pagetune")
    found = [] if exp is None else client.search_runs([exp.experiment_id], f"tags.`pagetune.study` = '{study}'")
    return ([r for r in found if "mlflow.parentRunId" not in r.data.tags],
            [r for r in found if "mlflow.parentRunId" in r.data.tags])


def test_a_server_down_midway_costs_nothing_and_the_replay_command_writes_it_all(tmp_path, mlflow_server):
    if not mlflow_server.up:
        mlflow_server.start()
    args = tuner_args(tmp_path, SAMPLE_TRAFFIC, f"tracking.uri={mlflow_server.uri}", "tracking.on_unreachable=continue",
                      study="down", trials=3)
    proc = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TQDM_DISABLE": "1"})
    deadline = time.monotonic() + 120
    while not _runs(mlflow_server.uri, "down")[1]:  # the first trial's run is in MLflow: the server goes
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-3000:]
        time.sleep(0.2)
    mlflow_server.kill()
    down_at = time.monotonic()
    stdout, stderr = proc.communicate(timeout=300)
    ran_down_s = time.monotonic() - down_at
    assert proc.returncode == 0, stderr[-3000:]
    logs = stdout + stderr
    assert logs.count("The study goes on without MLflow") == 1  # the banner, once
    assert "Traceback" not in logs
    fallback = tmp_path / "out-down" / "tracking-fallback.jsonl"
    events = [json.loads(line)["event"] for line in fallback.read_text().splitlines()]
    assert events[-2:] == ["study_artifacts", "study_finish"]
    assert len(study_trials(tmp_path, "down")) == 3
    mlflow_server.start()
    replayed = subprocess.run([sys.executable, "-m", "tuner.tracking", str(fallback), "--uri",
                               mlflow_server.uri], capture_output=True, text=True, cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stderr[-3000:]
    assert replayed.stdout.strip() == (f"replayed {len(events)} records of {fallback} into {mlflow_server.uri} "
                                       f"({len(events)} in all)")
    parents, children = _runs(mlflow_server.uri, "down")
    assert [p.info.status for p in parents] == ["FINISHED"]
    assert sorted((c.data.tags["pagetune.trial_number"], c.info.status) for c in children) == [
        ("0", "FINISHED"), ("1", "FINISHED"), ("2", "FINISHED")]
    assert "pagetune.verdict" in parents[0].data.tags
    again = subprocess.run([sys.executable, "-m", "tuner.tracking", str(fallback), "--uri", mlflow_server.uri],
                           capture_output=True, text=True, cwd=tmp_path)
    assert again.stdout.startswith("replayed 0 records")  # nothing is written twice
    print(f"study ran {ran_down_s:.1f} s with the server down")


def test_the_tracker_replays_the_fallback_whenever_the_server_is_back(tmp_path, mlflow_server, caplog, monkeypatch):
    """Down at the start, back, down again mid-trial, back: every payload in MLflow, each written once."""
    monkeypatch.setattr("tuner.tracking.outage.PROBE_EVERY_S", 0.0)  # look at every call
    fallback = tmp_path / "fb.jsonl"
    mlflow_server.kill()
    tracker = Tracker(mlflow_server.uri, "pagetune", "continue", fallback_path=fallback).check()
    assert not tracker.enabled
    parent = tracker.start_study("back", "a: 1\n", {}, {})
    first = tracker.begin_trial(parent, 0, {"x": 1}, "x: 1\n", {})
    assert (parent, first) == ("offline:back", "offline:back:trial:0")
    restart_s = mlflow_server.start()
    tracker.end_trial(first, {"capacity_rps": 2.0}, RunState.FINISHED, None, [])  # replays 2 records, then writes
    assert tracker.enabled
    second = tracker.begin_trial("offline:back", 1, {"x": 2}, "x: 2\n", {})  # the offline parent id still works
    mlflow_server.kill()
    began = time.monotonic()
    tracker.end_trial(second, {"capacity_rps": 3.0}, RunState.FINISHED, None, [])  # to the file
    detected_s = time.monotonic() - began
    mlflow_server.start()
    tracker.finish_study(parent)  # replays the trial's end, then closes the parent
    messages = [r.getMessage() for r in caplog.records if r.name == "pagetune"]
    back = [m for m in messages if m.startswith(f"MLflow tracking store {mlflow_server.uri} is back after")]
    assert [m.rsplit(":", 1)[1] for m in back] == [f" 2 records replayed from {fallback}",
                                                   f" 1 records replayed from {fallback}"]
    assert sum("The study goes on without MLflow" in m for m in messages) == 1  # the mid-study outage's banner
    parents, children = _runs(mlflow_server.uri, "back")
    assert [p.info.status for p in parents] == ["FINISHED"]
    assert sorted((c.data.tags["pagetune.trial_number"], c.info.status, c.data.metrics["capacity_rps"])
                  for c in children) == [("0", "FINISHED", 2.0), ("1", "FINISHED", 3.0)]
    assert (tmp_path / "fb.jsonl.replayed").read_text() == "3"  # the file's 3 lines, each written once
    assert detected_s < 10  # our bound, not MLflow's minutes
    print(f"down detected in {detected_s:.1f} s; server back in {restart_s:.1f} s")
