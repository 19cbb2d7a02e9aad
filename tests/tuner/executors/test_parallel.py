"""Independent measurements side by side: forked workers for the simulator, one at a time for anything else."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.runtime.sim.sim_factories import write_tiny_profile
from tuner.executors.parallel import measurement_workers, parallel_map
from tuner.interrupts import Interrupted
from tuner.testing import FakeExecutor

ROOT = Path(__file__).parents[3]
DEFAULT_ENV = {k: v for k, v in os.environ.items() if k != "PAGETUNE_PARALLEL_SIM"}  # side by side: the default


def test_results_come_back_in_task_order_from_forked_workers():
    done: list[int] = []
    here = os.getpid()
    out = parallel_map(lambda i: (i * i, os.getpid()), 7, 2, lambda i, r: done.append(i))
    assert [v for v, _ in out] == [0, 1, 4, 9, 16, 25, 36]
    assert here not in {pid for _, pid in out}
    assert sorted(done) == list(range(7))  # on_result ran here, once a task


def test_one_worker_runs_the_tasks_in_this_process():
    assert parallel_map(lambda i: (i, os.getpid()), 3, 1) == [(0, os.getpid()), (1, os.getpid()), (2, os.getpid())]


def test_a_poll_that_raises_stops_the_map_within_a_second():
    def slow(i: int) -> int:
        time.sleep(30)
        return i

    polls: list[int] = []

    def poll() -> None:
        polls.append(1)
        if len(polls) >= 3:  # before the fork, before the first wait, after it
            raise KeyboardInterrupt

    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        parallel_map(slow, 4, 2, poll=poll)
    assert time.monotonic() - start < 10  # not the 30 s a task takes: the pool is terminated
    assert len(polls) == 3


def test_a_stop_while_results_stream_in_is_seen_at_the_next_result():
    """Results that keep coming within half a second never let the wait time out: the poll runs at each one."""
    done: list[int] = []

    def poll() -> None:
        if len(done) >= 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        parallel_map(lambda i: i, 200, 2, lambda i, r: done.append(i), poll)
    assert len(done) == 3


def test_a_stop_asked_before_the_map_forks_no_worker(tmp_path):
    """A worker forked after the signal would inherit the stop: none is forked, no task runs."""
    def poll() -> None:
        raise Interrupted(signal.SIGTERM)

    with pytest.raises(Interrupted):
        parallel_map(lambda i: (tmp_path / str(i)).touch(), 4, 2, poll=poll)
    assert list(tmp_path.iterdir()) == []


def test_a_stop_raised_in_a_worker_stops_the_map_here_and_prints_nothing():
    """The flaky SIGTERM in the conclusion: workers forked after the signal inherited the stop and raised
    `Interrupted`, which failed to unpickle in the pool's result thread (ValueError: 'interrupted by SIGTERM' is
    not a valid Signals): that thread's traceback was printed and the map waited on. A fresh interpreter: bounded,
    and its stderr whole."""
    code = ("import signal; from tuner.executors.parallel import parallel_map\n"
            "from tuner.interrupts import Interrupted\n"
            "def task(i):\n    raise Interrupted(signal.SIGTERM)\n"
            "try:\n    parallel_map(task, 4, 2)\nexcept Interrupted as e:\n    print(e.signum, e.exit_code)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert (done.stdout.split(), done.stderr) == (["15", "143"], "")



def test_a_stop_raised_in_every_worker_never_hangs_the_map():
    """The hang of multiprocessing.Pool (about 3% of stops under load): terminate() killed a worker while it held
    the shared result queue's lock, and the pool's task thread waited on that lock forever. 60 stops in a row in a
    fresh interpreter: each comes back, and nothing is printed."""
    code = ("import signal; from tuner.executors.parallel import parallel_map\n"
            "from tuner.interrupts import Interrupted\n"
            "def task(i):\n    raise Interrupted(signal.SIGTERM)\n"
            "def stopped():\n    try:\n        parallel_map(task, 4, 2)\n"
            "    except Interrupted as e:\n        return e.exit_code\n"
            "print(sum(stopped() == 143 for _ in range(60)))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert (done.stdout.split(), done.stderr) == (["60"], "")


def test_a_worker_that_dies_fails_the_map_with_its_exit_code_at_once():
    def task(i: int) -> int:
        if i == 1:
            os._exit(3)
        time.sleep(30)
        return i

    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"^a map worker died without its result \(exit code 3\)$"):
        parallel_map(task, 4, 2)
    assert time.monotonic() - start < 10  # not the 30 s of the task beside it: that worker is killed


def test_a_result_that_cannot_be_pickled_comes_back_as_a_runtime_error_naming_it():
    with pytest.raises(RuntimeError, match=r"^task \d's result cannot be pickled: TypeError: cannot pickle"):
        parallel_map(lambda i: threading.Lock(), 4, 2)

class _Unrebuildable(Exception):
    def __init__(self, code: int, where: str) -> None:
        super().__init__(f"code {code} in {where}")  # one of args for two parameters: unpickling it fails


def test_a_failure_the_parent_cannot_rebuild_comes_back_as_a_runtime_error_naming_it():
    def task(i: int) -> int:
        raise _Unrebuildable(i, "a worker")

    deadline = time.monotonic() + 10

    def poll() -> None:
        assert time.monotonic() < deadline, "the map waited on: the pool's result thread died rebuilding it"

    with pytest.raises(RuntimeError, match=r"^_Unrebuildable: code \d in a worker$"):
        parallel_map(task, 4, 2, poll=poll)


def test_a_failing_task_fails_the_map_here_with_the_workers_traceback():
    with pytest.raises(ZeroDivisionError) as failed:
        parallel_map(lambda i: 1 // (i - 2), 4, 2)
    assert "in <lambda>" in str(failed.value.__cause__)  # where it failed, in the worker


def test_only_simulated_measurements_run_side_by_side_and_never_from_a_torch_process(tmp_path):
    code = ("import sys; from pathlib import Path; from tuner.executors.sim import SimExecutor\n"
            "from tuner.executors.parallel import measurement_workers as w, usable_cores\n"
            f"sim = SimExecutor(Path({str(write_tiny_profile(tmp_path))!r}))\n"
            "print(w(sim, 20) == min(20, usable_cores()), w(sim, 1))\n"
            "import os; os.environ['PAGETUNE_PARALLEL_SIM'] = '0'; print(w(sim, 20))\n"
            "del os.environ['PAGETUNE_PARALLEL_SIM']; import torch\n"
            "print(w(sim, 20))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env=DEFAULT_ENV)
    assert done.stdout.split() == ["True", "1", "1", "1"], done.stderr[-2000:]
    assert measurement_workers(FakeExecutor(lambda c: 1.0, 0.1, 0), 20) == 1  # a noisy executor: one at a time


def test_a_finished_map_never_signals_its_workers():
    """The hang seen once: the pool was terminated after every map, and a worker still alive that did not die of
    SIGTERM kept join() waiting forever. Workers here ignore SIGTERM; 30 maps in a row must all return."""
    code = ("import signal; from tuner.executors.parallel import parallel_map\n"
            "def task(i):\n    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n    return i\n"
            "print(all(parallel_map(task, 4, 2) == [0, 1, 2, 3] for _ in range(30)))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.stdout.split() == ["True"], done.stderr[-2000:]


def test_a_simulated_trial_probes_side_by_side_as_it_would_here(tmp_path):
    """Forked probes replay exactly as the same batches run in this process would, and find the edge that one
    probe at a time finds, to the tolerance (fresh interpreter: the tuner's parent has no torch)."""
    done = subprocess.run([sys.executable, "-m", "tests.tuner.executors.fan_check", str(write_tiny_profile(tmp_path))],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, env=DEFAULT_ENV)
    assert done.returncode == 0, done.stderr[-3000:]
    width, equal, probes, capacity = done.stdout.splitlines()
    assert (width, equal, probes) == ("width 2", "forked equal True True True", "probes 12 10")
    assert capacity == "capacity 0.190929 0.198425 0.192776 0.201311"  # both brackets hold the edge


def test_here_first_runs_task_zero_in_this_process_and_the_rest_beside_it():
    out = parallel_map(lambda i: (i, os.getpid()), 4, 2, here_first=True)
    assert [i for i, _ in out] == [0, 1, 2, 3]
    assert out[0][1] == os.getpid() and os.getpid() not in {pid for _, pid in out[1:]}
