"""VllmExecutor against the stand-in `vllm serve`: the probe, the key check, a trial started, measured over HTTP
and stopped, a crash and a start time-out failing only that trial, the probe without vLLM."""

from __future__ import annotations

import signal
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.tuner.tuner_factories import job, request, tiny_runtime
from tuner.config import ParamConfig, SearchConfig, SloConfig, TunerConfigError, VllmExecutorConfig
from tuner.executors.vllm import VllmExecutor, probe_vllm
from tuner.interrupts import Interrupted, Interrupts
from tuner.measure.job import TrialStatus
from tuner.search.space import SearchSpace
from tuner.vllm_args import VllmArgError

STANDIN = str(Path(__file__).with_name("vllm_standin.py"))
# 8 requests at once, 10 tokens each at 50 ms a token: 2 at a time (the stand-in's default) queue, 8 do not
BURST = tuple(request(f"r{i}", 0.0, 8, 10, first_id=10 + 8 * i) for i in range(8))
SLO = SloConfig(ttft_s=0.6, tpot_s=0.5)


def _cfg(tmp_path: Path, **changes) -> VllmExecutorConfig:
    return VllmExecutorConfig(**{
        "command": [sys.executable, STANDIN], "probe": [sys.executable, STANDIN, "--probe"],
        "args": {"load_format": "dummy"}, "start_timeout_s": 20.0, "stop_grace_s": 5.0, "work_dir": tmp_path / "work",
        "cache_dir": tmp_path / "cache", **changes})


@pytest.fixture
def executor(tmp_path, monkeypatch):
    monkeypatch.setenv("STANDIN_TOKEN_S", "0.05")
    ex = VllmExecutor(_cfg(tmp_path), "standin-model")
    yield ex
    ex.close()


def test_the_probe_describes_vllm_and_its_device(executor):
    hw = executor.describe(None)
    assert (hw.device_type, hw.name, hw.memory_gb, hw.summary) == ("cuda", "NVIDIA H200", 139.8, "1 x NVIDIA H200")
    assert hw.versions == "vLLM 0.26.0, vllm serve"
    assert executor.env["VLLM_CACHE_ROOT"] == str(Path(executor.cfg.cache_dir))


def test_a_trial_runs_its_config_on_a_server_of_its_own_and_reports_the_start_as_overhead(executor, tmp_path):
    config = {**tiny_runtime(), "scheduler": {"max_num_seqs": 8}}
    outcome = executor.run(job(config, "w", slo=SLO, number=3), BURST, lambda *p: None, lambda p: True, 60)
    assert outcome.status is TrialStatus.ok, outcome.reason
    assert outcome.measurement.metrics["slo_attainment"] == 1.0
    assert 0 < outcome.setup_s < 20
    written = yaml.safe_load((tmp_path / "work" / "001-trial-3.yaml").read_text())
    assert (written["model"], written["max-num-seqs"], written["load-format"]) == ("standin-model", 8, "dummy")
    log = (tmp_path / "work" / "001-trial-3.log").read_text()
    assert log.startswith(f"$ {sys.executable} {STANDIN} serve --config {tmp_path / 'work' / '001-trial-3.yaml'} ")
    # two at a time: the queue misses the TTFT bound; the config is what moved it
    few = executor.run(job({**tiny_runtime(), "scheduler": {"max_num_seqs": 2}}, "w", slo=SLO), BURST,
                       lambda *p: None, lambda p: True, 60)
    assert few.status is TrialStatus.ok and few.measurement.metrics["slo_attainment"] <= 0.5


def test_a_server_that_crashes_fails_that_trial_with_its_own_message(tmp_path, monkeypatch):
    monkeypatch.setenv("STANDIN_MODE", "crash")  # the servers' environment is taken when the executor opens
    executor = VllmExecutor(_cfg(tmp_path), "m")
    outcome = executor.run(job(tiny_runtime(), "w"), BURST, lambda *p: None, lambda p: True, 60)
    assert outcome.status is TrialStatus.error
    assert outcome.reason.startswith("vllm serve exited with code 1 before it was ready: $ ")
    assert outcome.reason.endswith("RuntimeError: CUDA out of memory while capturing graphs (stand-in)")


def test_a_server_that_hangs_fails_at_the_start_time_out(tmp_path, monkeypatch):
    monkeypatch.setenv("STANDIN_MODE", "hang")
    ex = VllmExecutor(_cfg(tmp_path, start_timeout_s=1.0, stop_grace_s=0.2), "m")
    outcome = ex.run(job(tiny_runtime(), "w"), BURST, lambda *p: None, lambda p: True, 60)
    assert outcome.status is TrialStatus.error
    assert outcome.reason.startswith("vllm serve was not ready after 1 s (executor.vllm.start_timeout_s): $ ")


def test_every_knob_and_deployment_arg_is_checked_before_the_first_trial(executor, tmp_path):
    executor.check(SearchSpace.from_config(SearchConfig({
        "seqs": ParamConfig("runtime.scheduler.max_num_seqs", "int", low=8, high=64),
        "graphs": ParamConfig("runtime.kernel.cuda_graphs", choices=[None, False, True]),
        "pad": ParamConfig("runtime.kernel.pad_multiple", choices=[1, 8]),  # no vLLM option: nothing to check
        "async": ParamConfig("vllm.async_scheduling", choices=[None, True, False])})))
    bad = SearchSpace.from_config(SearchConfig({"x": ParamConfig("vllm.async_scheduler", choices=[True])}))
    with pytest.raises(VllmArgError) as e:
        executor.check(bad)
    assert str(e.value) == ("search.params.x (vllm.async_scheduler): vLLM 0.26.0 has no engine option "
                            "'async_scheduler' (did you mean 'async_scheduling'?)")
    kv = SearchSpace.from_config(SearchConfig({"kv": ParamConfig("runtime.cache.kv_cache_dtype",
                                                                 choices=["auto", "fp8_e4m3", "float32"])}))
    with pytest.raises(VllmArgError, match=r"^search\.params\.kv \(runtime\.cache\.kv_cache_dtype\): vLLM 0\.26\.0's "
                                           r"--kv-cache-dtype 'float32' is not one of its choices"):
        executor.check(kv)
    deploy = VllmExecutor(_cfg(tmp_path, args={"load_format": 7, "tokenizer_path": "x"}), "m", executor.probe)
    with pytest.raises(VllmArgError, match=r"^executor\.vllm\.args\.tokenizer_path: vLLM 0\.26\.0 has no engine"):
        deploy.check(SearchSpace.from_config(SearchConfig({})))


def test_without_vllm_the_probe_says_how_to_install_it(tmp_path):
    with pytest.raises(TunerConfigError) as e:
        probe_vllm(VllmExecutorConfig())  # this Python has no vLLM: tuner/executors/vllm_probe.py exits NO_VLLM
    assert str(e.value) == (f"executor=vllm: vLLM is not installed for {sys.executable}: pip install "
                            "'pagetune[vllm]' (vLLM 0.26.0), or point executor.vllm.probe and executor.vllm.command "
                            "at an environment that has it")


def test_a_signal_stops_the_server_at_once_and_the_trial_is_interrupted(tmp_path, monkeypatch):
    monkeypatch.setenv("STANDIN_TOKEN_S", "0.05")
    interrupts = Interrupts()
    executor = VllmExecutor(_cfg(tmp_path), "m", interrupts=interrupts)
    slow = tuple(request(f"r{i}", 0.2 * i, 8, 40, first_id=10 + 8 * i) for i in range(50))  # 10 s of replay
    threading.Timer(2.0, lambda: setattr(interrupts, "signum", signal.SIGTERM)).start()
    began = time.monotonic()
    with pytest.raises(Interrupted):
        executor.run(job(tiny_runtime(), "w"), slow, lambda *p: None, lambda p: True, 60)
    assert time.monotonic() - began < 6
    assert executor._servers is None
    assert "serving on" in (tmp_path / "work" / "001-trial-0.log").read_text()
