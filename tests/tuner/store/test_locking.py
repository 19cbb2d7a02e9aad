"""The store lock between processes: mutual exclusion per name, independence across names, no file left."""

from __future__ import annotations

import multiprocessing as mp
import time

from tuner.store.locking import store_lock


def _hold(url: str, name: str, times: int, events) -> None:
    for _ in range(times):
        with store_lock(url, name):
            events.put((time.monotonic(), name, +1))
            time.sleep(0.003)
            events.put((time.monotonic(), name, -1))


def test_one_holder_per_name_and_the_lock_file_is_removed_by_the_last(tmp_path):
    url = f"sqlite:///{tmp_path}/optuna.db"
    events = mp.get_context("spawn").Queue()
    procs = [mp.get_context("spawn").Process(target=_hold, args=(url, name, 60, events))
             for name in ("open:a", "open:a", "open:a", "open:b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    inside = {"open:a": 0, "open:b": 0}
    peak = {"open:a": 0, "open:b": 0}
    for _, name, step in sorted(events.get() for _ in range(2 * 4 * 60)):
        inside[name] += step
        peak[name] = max(peak[name], inside[name])
    assert peak == {"open:a": 1, "open:b": 1}  # never two holders of one name (monotonic clock: one machine)
    assert list(tmp_path.iterdir()) == []  # no lock file left behind
