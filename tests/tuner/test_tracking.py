"""Tracker against a real MLflow SQLite store (one per module: creating its schema takes seconds)."""

from __future__ import annotations

import json
import logging
import math
import multiprocessing
import socket
import time
from pathlib import Path
from typing import NamedTuple

import pytest
from mlflow import MlflowClient
from mlflow.entities import ViewType

from tuner.tracking import RunState, Tracker, TrackingError
from tuner.tracking.payloads import latency_csv, params_to_strings, split_metrics

CONFIG = "runtime:\n  cache:\n    block_size: 16\nstorage: postgresql://tuner:s3cret@db/optuna\n"
MASKED_CONFIG = "runtime:\n  cache:\n    block_size: 16\nstorage: postgresql://tuner:***@db/optuna\n"


class Store(NamedTuple):
    folder: Path
    uri: str
    tracker: Tracker
    client: MlflowClient


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    folder = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{folder}/mlflow.db"
    tracker = Tracker(uri, "pagetune-test", artifact_location=str(folder / "artifacts"),
                      fallback_path=folder / "fallback.jsonl")
    assert tracker.check() is tracker
    return Store(folder, uri, tracker, MlflowClient(uri))


def _experiment_id(store: Store) -> str:
    return store.client.get_experiment_by_name("pagetune-test").experiment_id


def _parents(store: Store, study: str, view: int = ViewType.ACTIVE_ONLY) -> list:
    runs = store.client.search_runs([_experiment_id(store)], "tags.`pagetune.role` = 'study'", view)
    return [r for r in runs if r.data.tags["pagetune.study"] == study]


def _children(store: Store, parent: str) -> list:
    return store.client.search_runs([_experiment_id(store)], f"tags.`mlflow.parentRunId` = '{parent}'")


def _artifact(store: Store, run_id: str, name: str, tmp_path: Path) -> str:
    return Path(store.client.download_artifacts(run_id, name, str(tmp_path))).read_text()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- study parent ------------------------------------------------------------------------------


def test_start_study_twice_finds_the_same_parent(store, tmp_path):
    first = store.tracker.start_study("twice", CONFIG, {"hardware": "cpu"})
    again = store.tracker.start_study("twice", CONFIG, {"hardware": "cpu"})
    assert again == first
    assert [r.info.run_id for r in _parents(store, "twice")] == [first]
    run = store.client.get_run(first)
    assert (run.info.status, run.info.run_name, run.data.tags["hardware"]) == ("RUNNING", "twice", "cpu")
    assert _artifact(store, first, "config.yaml", tmp_path) == MASKED_CONFIG


def _start_in_child(uri: str, barrier, results) -> None:
    # A different spelling of the same file: the child gets its own SQLAlchemy engine instead of
    # the pooled connections inherited through fork.
    tracker = Tracker(uri.replace("/mlflow.db", "/./mlflow.db"), "pagetune-test")
    barrier.wait()
    results.put(tracker.start_study("raced", CONFIG, {}))


def test_three_workers_starting_at_once_share_one_parent(store):
    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(3), context.Queue()
    workers = [context.Process(target=_start_in_child, args=(store.uri, barrier, results)) for _ in range(3)]
    for worker in workers:
        worker.start()
    ids = [results.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    assert [w.exitcode for w in workers] == [0, 0, 0]
    parents = _parents(store, "raced")
    assert len(set(ids)) == 1 and [r.info.run_id for r in parents] == ids[:1]
    # Workers that lost the race closed and deleted their own duplicate.
    deleted = _parents(store, "raced", ViewType.DELETED_ONLY)
    # How many raced to create (1 to 3) depends on timing; never more than two duplicates.
    assert len(deleted) <= 2
    assert all(r.info.status == "KILLED" for r in deleted)


def test_finish_then_resume_reopens_the_parent(store, tmp_path):
    parent = store.tracker.start_study("resumed", CONFIG, {})
    plot = tmp_path / "history.png"
    plot.write_bytes(b"\x89PNG fake")
    store.tracker.log_study_artifacts(parent, [plot], {"best_goodput": 3.5, "bad": math.inf})
    store.tracker.finish_study(parent)
    run = store.client.get_run(parent)
    assert run.info.status == "FINISHED"
    assert run.data.metrics == {"best_goodput": 3.5}
    assert run.data.tags["pagetune.skipped_metrics"] == "bad"
    assert sorted(f.path for f in store.client.list_artifacts(parent)) == ["config.yaml", "history.png"]
    assert store.tracker.start_study("resumed", CONFIG, {}) == parent
    assert store.client.get_run(parent).info.status == "RUNNING"


# ---- trial children ----------------------------------------------------------------------------

PARAMS = {"cache.block_size": 16, "cache.enable_prefix_caching": True, "kernel.qk_clip": None,
          "cache.block_tiers": [{"max_len": 512, "block_size": 8}], "note": "x" * 600,
          "storage.url": "postgresql://tuner:s3cret@db/optuna"}
ROWS = [{"request_id": "r0", "ttft_s": 0.125, "tpot_s": 0.03125}, {"request_id": "r1", "ttft_s": 0.5}]


def test_log_trial_records_everything_and_closes_the_run(store, tmp_path):
    parent = store.tracker.start_study("logged", CONFIG, {})
    run_id = store.tracker.log_trial(parent, 3, PARAMS, {"goodput": 2.5, "p99_ttft_s": math.nan},
                                     "FAILED", "OOM at postgresql://tuner:s3cret@db/x", CONFIG, ROWS,
                                     {"worker": "gpu0"})
    run = store.client.get_run(run_id)
    assert run.info.status == "FAILED" and run.info.run_name == "trial-3"
    assert run.data.params == {
        "cache.block_size": "16", "cache.enable_prefix_caching": "true", "kernel.qk_clip": "null",
        "cache.block_tiers": '[{"block_size": 8, "max_len": 512}]', "note": "x" * 497 + "...",
        "storage.url": "postgresql://tuner:***@db/optuna"}
    assert run.data.metrics == {"goodput": 2.5}
    tags = {k: v for k, v in run.data.tags.items() if k not in ("mlflow.runName", "mlflow.user")}
    assert tags == {"mlflow.parentRunId": parent, "pagetune.study": "logged", "pagetune.role": "trial",
                    "pagetune.trial_number": "3", "worker": "gpu0", "pagetune.truncated_params": "note",
                    "pagetune.skipped_metrics": "p99_ttft_s",
                    "pagetune.failure_reason": "OOM at postgresql://tuner:***@db/x"}
    names = sorted(f.path for f in store.client.list_artifacts(run_id))
    assert names == ["config.yaml", "failure.txt", "latencies.csv"]
    assert _artifact(store, run_id, "config.yaml", tmp_path) == MASKED_CONFIG
    assert _artifact(store, run_id, "latencies.csv", tmp_path) == (
        "request_id,ttft_s,tpot_s\nr0,0.125,0.03125\nr1,0.5,\n")
    assert _artifact(store, run_id, "failure.txt", tmp_path) == "OOM at postgresql://tuner:***@db/x"


def test_logging_a_trial_twice_keeps_one_child(store, tmp_path):
    parent = store.tracker.start_study("retried", CONFIG, {})
    first = store.tracker.log_trial(parent, 0, {"a": 1}, {}, "FAILED", "crash", CONFIG, [], {})
    second = store.tracker.log_trial(parent, 0, {"a": 2}, {"goodput": 1.0}, RunState.FINISHED, None,
                                     CONFIG, ROWS, {})
    other = store.tracker.log_trial(parent, 1, {"a": 3}, {"goodput": 0.5}, "KILLED", None, CONFIG, [], {})
    children = {r.info.run_id: r for r in _children(store, parent)}
    assert sorted(children) == sorted([second, other])
    assert store.client.get_run(first).info.lifecycle_stage == "deleted"
    kept = children[second]
    assert (kept.info.status, kept.data.params) == ("FINISHED", {"a": "2"})
    assert kept.data.metrics == {"goodput": 1.0}
    assert "pagetune.failure_reason" not in kept.data.tags
    assert sorted(f.path for f in store.client.list_artifacts(second)) == ["config.yaml", "latencies.csv"]
    assert children[other].info.status == "KILLED"


def test_stale_running_child_of_a_dead_worker_is_failed(store, tmp_path):
    parent = store.tracker.start_study("stale", CONFIG, {})
    dead = store.tracker.begin_trial(parent, 5, {"a": 1}, CONFIG, {})
    alive = store.tracker.begin_trial(parent, 6, {"a": 2}, CONFIG, {})
    assert store.client.get_run(dead).info.status == "RUNNING"
    assert store.tracker.mark_stale_running(parent, alive_trial_numbers={6}) == [5]
    run = store.client.get_run(dead)
    assert (run.info.status, run.data.tags["pagetune.failure_reason"]) == ("FAILED", "worker died")
    assert _artifact(store, dead, "failure.txt", tmp_path) == "worker died"
    assert store.client.get_run(alive).info.status == "RUNNING"
    assert store.tracker.mark_stale_running(parent, alive_trial_numbers={6}) == []
    store.tracker.end_trial(alive, {"goodput": 4.0}, "FINISHED", None, ROWS)
    assert store.client.get_run(alive).info.status == "FINISHED"


# ---- unreachable store -------------------------------------------------------------------------


def test_unreachable_http_store_fails_fast_with_masked_uri(tmp_path):
    port = _closed_port()
    start = time.monotonic()
    with pytest.raises(TrackingError) as err:
        Tracker(f"http://tuner:s3cret@127.0.0.1:{port}", "e", fallback_path=tmp_path / "f.jsonl").check()
    assert time.monotonic() - start < 10
    assert f"http://tuner:***@127.0.0.1:{port}" in str(err.value) and "s3cret" not in str(err.value)
    assert not (tmp_path / "f.jsonl").exists()


def test_unreachable_postgres_store_fails_fast(tmp_path):
    pytest.importorskip("psycopg")
    port = _closed_port()
    start = time.monotonic()
    with pytest.raises(TrackingError, match=rf"postgresql\+psycopg://tuner:\*\*\*@127\.0\.0\.1:{port}/db"):
        Tracker(f"postgresql+psycopg://tuner:s3cret@127.0.0.1:{port}/db", "e").check()
    assert time.monotonic() - start < 10


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_unreachable_with_continue_buffers_every_payload(tmp_path, caplog):
    fallback = tmp_path / "fallback.jsonl"
    port = _closed_port()
    with caplog.at_level(logging.WARNING):
        tracker = Tracker(f"http://127.0.0.1:{port}", "e", "continue", fallback_path=fallback).check()
    assert not tracker.enabled  # payloads to the file, replayed into MLflow if the store comes back
    assert "TRACKING IS DISABLED" in caplog.text
    parent = tracker.start_study("offline", CONFIG, {"hardware": "cpu"})
    run_id = tracker.log_trial(parent, 2, {"cache.block_size": 16}, {"goodput": 1.5, "p99": math.inf},
                               "FINISHED", None, CONFIG, ROWS, {"worker": "w"})
    lines = _lines(fallback)
    assert [line["event"] for line in lines] == ["study_start", "trial_begin", "trial_end"]
    assert (parent, run_id) == ("offline:offline", "offline:offline:trial:2")
    assert {k: lines[1][k] for k in ("run_id", "trial_number", "params", "config_yaml", "extra_tags")} == {
        "run_id": run_id, "trial_number": 2, "params": {"cache.block_size": 16},
        "config_yaml": MASKED_CONFIG, "extra_tags": {"worker": "w"}}
    assert {k: lines[2][k] for k in ("run_id", "metrics", "state", "reason", "latency_rows")} == {
        "run_id": run_id, "metrics": {"goodput": 1.5, "p99": "inf"}, "state": "FINISHED", "reason": None,
        "latency_rows": ROWS}


def test_store_error_mid_study_goes_to_fallback_or_raises(store, tmp_path):
    missing_parent = "0" * 32
    keep = Tracker(store.uri, "pagetune-test", "continue", fallback_path=tmp_path / "f.jsonl")
    run_id = keep.log_trial(missing_parent, 9, {"a": 1}, {"goodput": 1.0}, "FINISHED", None, CONFIG, [], {})
    assert run_id == f"offline:{missing_parent}:trial:9"
    assert [line["event"] for line in _lines(tmp_path / "f.jsonl")] == ["trial_begin", "trial_end"]
    strict = Tracker(store.uri, "pagetune-test", "fail")
    with pytest.raises(TrackingError, match=r"writing to MLflow tracking store sqlite:///.*not found"):
        strict.begin_trial(missing_parent, 9, {"a": 1}, CONFIG, {})


def test_a_half_written_trial_run_is_closed_not_left_running(store):
    parent = store.tracker.start_study("half", CONFIG, {})
    with pytest.raises(TrackingError, match="Invalid value"):
        store.tracker.begin_trial(parent, 4, {"bad!key": 1}, CONFIG, {})
    [child] = _children(store, parent)
    assert (child.info.status, child.data.tags["pagetune.trial_number"]) == ("FAILED", "4")


# ---- pure record helpers -----------------------------------------------------------------------


def test_record_helpers_are_exact():
    assert params_to_strings({"b": 1.5, "e": "x" * 501}) == ({"b": "1.5", "e": "x" * 497 + "..."}, ("e",))
    assert split_metrics({"a": 1, "n": math.nan, "i": -math.inf}) == ({"a": 1.0}, ("i", "n"))
    assert latency_csv([{"a": 1}, {"b": 2, "a": 3}]) == "a,b\n1,\n3,2\n"
    assert latency_csv([]) == "\n"
