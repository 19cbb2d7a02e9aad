"""A real deployment of replicas (`devices` > 1, executor real): two CPU replicas of the tiny model measured as one
behind the least-outstanding-requests dispatcher, both serving; a replica that dies or cannot start fails the
trial with one line; each replica's GPU slice."""

from __future__ import annotations

import re
import signal
import sys
from pathlib import Path

import pytest

from runtime import EngineConfig
from tests.tuner.tuner_factories import request, tiny_runtime
from tuner.config import ObjectiveName, SloConfig, TunerConfigError
from tuner.executors.replicas import ReplicasExecutor, device_slices
from tuner.measure.job import Hardware, MeasurePlan, TrialJob, TrialStatus

CPU = Hardware("cpu", "CPU", None, "CPU x86_64 x 2 cores", "torch")
GPU = Hardware("cuda", "NVIDIA H200", 139.8, "2 x NVIDIA H200", "torch", gpus=2)  # a description: no GPU is used
STANDIN = [sys.executable, str(Path(__file__).with_name("vllm_standin.py")), "serve"]
# 8 pairs of requests 0.125 s apart (0.875 s), 4 tokens each: a light load for two tiny replicas on a CPU, each
# pair sent to both when they are idle
WINDOW = tuple(request(f"r{i}", 0.125 * (i // 2), 16, 4, first_id=10 + 16 * i) for i in range(16))
# a capacity search up to 2x the window's rate (no window shorter than 0.4375 s)
PLAN = MeasurePlan(ObjectiveName.capacity, SloConfig(ttft_s=2.0, tpot_s=1.0), repeats=1, min_window_s=0.4375)


def _job(number: int = 0, **sections) -> TrialJob:
    return TrialJob(number, EngineConfig.from_mapping(tiny_runtime(**sections)), None, "w", PLAN)


def _quiet(*args) -> None:
    pass


def _served(log: Path) -> int:
    """Completions the replica answered, from its own access log."""
    return len(re.findall(r'"POST /v1/completions HTTP/1.1" 200', log.read_text()))


def test_two_cpu_replicas_measure_the_deployments_capacity_and_both_serve(tmp_path):
    executor = ReplicasExecutor(2, CPU, work_dir=tmp_path)
    outcome = executor.run(_job(3), WINDOW, _quiet, lambda p: True, 120)
    assert outcome.status is TrialStatus.ok, outcome.reason
    measurement = outcome.measurement
    assert ([p.scale for p in measurement.probes], measurement.values, measurement.saturated) == ([1.0, 2.0], (2.0,),
                                                                                                 True)
    assert measurement.metrics["slo_attainment"] == 1.0
    assert outcome.setup_s > 0  # the replicas' start: the trial's overhead
    served = [_served(tmp_path / f"001-trial-3-replica-{i}.log") for i in (1, 2)]
    assert min(served) > 0 and sum(served) == 2 * len(WINDOW), served
    assert executor._servers is None


def test_a_replica_that_dies_fails_the_trial_with_its_own_last_line(tmp_path, monkeypatch):
    monkeypatch.setenv("STANDIN_TOKEN_S", "0.05")
    executor = ReplicasExecutor(2, GPU, work_dir=tmp_path, command=STANDIN)
    slow = tuple(request(f"r{i}", 0.1 * i, 8, 10, first_id=10 + 8 * i) for i in range(30))  # 3 s of replay
    seen: list[list[bytes]] = []
    probes: set[int] = set()

    def kill_replica_2(probe: int, *progress) -> None:
        """At the first request answered, replica 2 is killed (its slice of the devices read first)."""
        probes.add(probe)
        if seen:
            return
        proc = executor._servers.servers[1]._proc
        environ = Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0")
        seen.append([e for e in environ if e.startswith(b"CUDA_VISIBLE_DEVICES=")])
        proc.send_signal(signal.SIGKILL)

    outcome = executor.run(_job(), slow, kill_replica_2, lambda p: True, 60)
    assert seen == [[b"CUDA_VISIBLE_DEVICES=1"]]  # its slice of the two devices
    assert len(probes) <= 2  # the search stops at the first replay after it sees the death (under load, the next)
    assert outcome.status is TrialStatus.error and "\n" not in outcome.reason
    log = (tmp_path / "001-trial-0-replica-2.log").read_text()
    port = re.search(r"--port (\d+)", log).group(1)
    assert outcome.reason.startswith("died while measured: replica 2 of 2 (GPUs 1) exited with code -9: $ ")
    assert outcome.reason.endswith(f" | serving on {port}")


def test_a_replica_that_cannot_start_fails_the_trial_and_the_next_trial_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("STANDIN_MODE", "crash")
    executor = ReplicasExecutor(2, CPU, work_dir=tmp_path, command=STANDIN)
    outcome = executor.run(_job(), WINDOW[:4], _quiet, lambda p: True, 60)
    assert outcome.status is TrialStatus.error and "\n" not in outcome.reason
    assert re.match(r"^replica [12] of 2 exited with code 1 before it was ready: \$ ", outcome.reason), outcome.reason
    assert outcome.reason.endswith(" | RuntimeError: CUDA out of memory while capturing graphs (stand-in)")
    del executor.env["STANDIN_MODE"]  # the next trial's replicas start
    ok = executor.run(_job(1), WINDOW[:4], _quiet, lambda p: True, 60)
    assert ok.status is TrialStatus.ok, ok.reason


def test_each_replica_gets_consecutive_devices_of_the_visible_ones(tmp_path):
    with pytest.raises(TunerConfigError, match=r"^devices: 4 GPUs, but this machine shows 2 \(2 x NVIDIA H200\)$"):
        ReplicasExecutor(4, GPU, work_dir=tmp_path)
    assert device_slices(4, 2, None) == ["0,1", "2,3"]
    assert device_slices(4, 1, "3,5,6,7") == ["3", "5", "6", "7"]
    assert device_slices(2, 2, "1,2,3") == ["1,2"]
    with pytest.raises(TunerConfigError, match=r"^devices: 4, but CUDA_VISIBLE_DEVICES lists 2 \(0,1\)$"):
        device_slices(4, 1, "0,1")
