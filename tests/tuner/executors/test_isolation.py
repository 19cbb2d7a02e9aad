"""Trial isolation with real faults: the supervisor's spawned worker on the tiny CPU engine, no mocks.

Every test checks the outcome the study sees (status and reason), then that the same supervisor runs
an ordinary trial to completion afterwards: the parent never dies, a lost worker is replaced.
One supervisor serves the whole module (a worker start costs seconds of imports), so the tests
read `restarts` and `pid` relative to their own start.
"""

from __future__ import annotations

import os
import re
import resource
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.tuner.tuner_factories import burst, job, tiny_runtime
from tuner.config import ObjectiveName, SloConfig
from tuner.executors.supervisor import WorkerSupervisor
from tuner.measure.job import MeasurePlan, TrialJob, TrialOutcome, TrialStatus

SHORT = burst(4)  # a few tenths of a second of work
# ~100 x 200 decode steps one request at a time: tens of seconds, far past any timeout below.
LONG = burst(100, prompt_len=16, output_tokens=200)
LONG_RUNTIME = tiny_runtime(scheduler={"max_num_seqs": 1, "max_model_len": 256})
quiet = lambda probe, scale, done, total: None
keep_going = lambda probe: True


def _address_space_gb() -> float:
    """This process's virtual size: the worker imports the same libraries, so it starts about as large."""
    pages = int(Path("/proc/self/statm").read_text().split()[0])
    return pages * os.sysconf("SC_PAGE_SIZE") / (1 << 30)


@pytest.fixture(scope="module")
def supervisor():
    # An address-space cap with room for tiny trials (~0.1 GiB) but not for a big KV pool.
    sup = WorkerSupervisor(cpu_threads=1, memory_limit_gb=round(_address_space_gb() + 1.5, 1))
    yield sup
    sup.close()


def run_normal(sup: WorkerSupervisor) -> TrialOutcome:
    """An ordinary trial: it must complete with every request measured."""
    outcome = sup.run(job(tiny_runtime(), "short"), SHORT, quiet, keep_going, timeout_s=60)
    assert (outcome.status, outcome.reason) == (TrialStatus.ok, None)
    assert (len(outcome.measurement.latency_rows), outcome.measurement.metrics["rejections"]) == (4, 0.0)
    return outcome


def test_model_weights_are_reused_across_trials_and_setup_time_is_reported(supervisor):
    seeded = tiny_runtime(model={"seed": 7})  # a model no other test loads: the first trial must load it
    first = supervisor.run(job(seeded, "short"), SHORT, quiet, keep_going, timeout_s=60)
    second = supervisor.run(job(seeded, "short"), SHORT, quiet, keep_going, timeout_s=60)
    other_knobs = supervisor.run(job(tiny_runtime(model={"seed": 7}, cache={"block_size": 8}), "short"), SHORT,
                                 quiet, keep_going, timeout_s=60)
    assert [o.status for o in (first, second, other_knobs)] == [TrialStatus.ok] * 3
    assert [o.model_reused for o in (first, second, other_knobs)] == [False, True, True]
    # reported for each; no order between them is asserted: the tiny model loads in about the time a busy host
    # takes to build an engine, so which was faster is the host's load, not the reuse (model_reused says that)
    assert all(o.setup_s > 0.0 for o in (first, second, other_knobs))


def test_config_the_engine_refuses_at_start_is_infeasible(supervisor):
    run_normal(supervisor)
    pid, restarts = supervisor.pid, supervisor.restarts
    tiny_pool = tiny_runtime(cache={"device_memory_gb": 0.01})
    outcome = supervisor.run(job(tiny_pool, "short"), SHORT, quiet, keep_going, timeout_s=60)
    assert outcome.status is TrialStatus.infeasible
    assert outcome.reason.startswith(
        "cache: KV pool of tier 0 (block_size 16) holds 0 blocks but one request of 128 tokens needs 8.")
    assert outcome.measurement is None
    run_normal(supervisor)
    assert (supervisor.pid, supervisor.restarts) == (pid, restarts)  # the worker itself was fine


def test_missing_model_is_infeasible_with_the_loaders_message(supervisor):
    outcome = supervisor.run(job(tiny_runtime(model={"name": "/nonexistent/model"}), "short"), SHORT, quiet,
                             keep_going, timeout_s=60)
    assert outcome.status is TrialStatus.infeasible
    assert outcome.reason.startswith("model '/nonexistent/model' is neither a preset (tiny, ")
    assert outcome.reason.endswith(") nor a .gguf file nor a local folder with config.json")
    run_normal(supervisor)


def test_trial_that_raises_is_an_error_with_type_and_place(supervisor, llama_dir, tmp_path):
    """A checkpoint whose weights file is truncated: safetensors raises from inside the model load."""
    broken = tmp_path / "truncated"
    broken.mkdir()
    (broken / "config.json").write_bytes((llama_dir / "config.json").read_bytes())
    weights = next(llama_dir.glob("*.safetensors")).read_bytes()
    (broken / "model.safetensors").write_bytes(weights[:1000])
    run_normal(supervisor)
    pid, restarts = supervisor.pid, supervisor.restarts
    outcome = supervisor.run(job(tiny_runtime(model={"name": str(broken)}), "short"), SHORT, quiet, keep_going,
                             timeout_s=60)
    assert outcome.status is TrialStatus.error
    assert outcome.reason.startswith("SafetensorError: Error while deserializing header")
    assert re.search(r" \(at \S+/runtime/model/loader\.py:\d+\)$", outcome.reason)  # where it was raised
    run_normal(supervisor)
    assert (supervisor.pid, supervisor.restarts) == (pid, restarts)


def test_trial_past_the_memory_limit_is_oom(supervisor):
    run_normal(supervisor)
    cap = int(supervisor.memory_limit_gb * (1 << 30))
    assert resource.prlimit(supervisor.pid, resource.RLIMIT_AS) == (cap, cap)  # the worker's address-space cap
    pid, restarts = supervisor.pid, supervisor.restarts
    # 0.9 x twice the cap planned for KV: the pool's K and V tensors (0.9 x the cap each) cannot both be mapped.
    huge_pool = tiny_runtime(cache={"device_memory_gb": 2 * supervisor.memory_limit_gb})
    outcome = supervisor.run(job(huge_pool, "short"), SHORT, quiet, keep_going, timeout_s=60)
    assert outcome.status is TrialStatus.oom
    # the KV pool (a CPU pool is allocated by numpy's calloc, so its pages are committed as they are used)
    assert re.fullmatch(r"out of memory: Unable to allocate [\d.]+ GiB for an array with shape \(4, \d+, 16, 2, 32\) "
                        r"and data type float32", outcome.reason)
    run_normal(supervisor)
    assert (supervisor.pid, supervisor.restarts) == (pid, restarts)  # the failed allocation cost no worker


def test_trial_past_its_timeout_is_killed_and_the_worker_replaced(supervisor):
    run_normal(supervisor)  # a warm worker: the timeout below is spent replaying, not importing
    pid, restarts = supervisor.pid, supervisor.restarts
    start = time.monotonic()
    outcome = supervisor.run(job(LONG_RUNTIME, "long"), LONG, quiet, keep_going, timeout_s=2.0)
    assert 2.0 <= time.monotonic() - start < 15.0
    assert (outcome.status, outcome.reason) == (TrialStatus.timeout, "timed out after 2 s (tuner.trial_timeout_s)")
    assert (supervisor.pid, supervisor.restarts) == (None, restarts + 1)
    run_normal(supervisor)
    assert supervisor.pid not in (None, pid)


def test_worker_killed_mid_trial_is_died_and_replaced(supervisor):
    run_normal(supervisor)
    pid, restarts = supervisor.pid, supervisor.restarts
    replaying = threading.Event()

    def kill_once_replaying() -> None:
        if replaying.wait(timeout=60):  # the first progress report: the trial is mid-replay
            time.sleep(1.0)
            os.kill(pid, signal.SIGKILL)

    def note_progress(probe: int, scale: float, done: int, total: int) -> None:
        replaying.set()

    killer = threading.Thread(target=kill_once_replaying)
    killer.start()
    outcome = supervisor.run(job(LONG_RUNTIME, "long"), LONG, note_progress, keep_going, timeout_s=120)
    killer.join()
    assert (outcome.status, outcome.reason) == (TrialStatus.died, "worker process killed by SIGKILL")
    assert (supervisor.pid, supervisor.restarts) == (None, restarts + 1)
    run_normal(supervisor)
    assert supervisor.pid not in (None, pid)


def test_checkpoint_answered_stop_prunes_the_trial_after_its_first_whole_probe(supervisor):
    """Early stopping only at the checkpoint: the first capacity probe, every request of the window replayed."""
    seen: list[tuple[float, int]] = []

    def stop(probe) -> bool:
        seen.append((probe.scale, len(probe.replays)))
        return False

    plan = MeasurePlan(ObjectiveName.capacity, SloConfig(), repeats=1, start_scale=2.0, checkpoint=True)
    outcome = supervisor.run(TrialJob(3, job(tiny_runtime(), "burst8").config, None, "burst8", plan), burst(8),
                             quiet, stop, timeout_s=60)
    assert outcome.status is TrialStatus.pruned and outcome.reason.startswith("fails the SLO at the incumbent's")
    assert seen == [(2.0, 1)] and outcome.checkpoint.scale == 2.0
    assert outcome.measurement.metrics["probes"] == 1.0 and len(outcome.measurement.latency_rows) == 8
    pid = supervisor.pid
    run_normal(supervisor)
    assert supervisor.pid == pid


def test_progress_callback_that_raises_costs_the_worker_not_the_next_trial(supervisor):
    """The parent's own callback fails (an Optuna storage error, say) while the worker waits for its answer:
    the error reaches the caller, and the next trial gets its own result, not the abandoned one's."""
    run_normal(supervisor)
    pid, restarts = supervisor.pid, supervisor.restarts

    def storage_down(probe, scale, done, total) -> None:
        raise ConnectionError("storage unreachable")

    with pytest.raises(ConnectionError, match="storage unreachable"):
        supervisor.run(job(tiny_runtime(), "burst8"), burst(8), storage_down, keep_going, timeout_s=60)
    assert supervisor.restarts == restarts + 1
    run_normal(supervisor)
    assert supervisor.pid not in (None, pid)
