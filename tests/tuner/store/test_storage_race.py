"""Processes opening one fresh SQLite study store at the same moment all get a working storage.

Optuna creates its tables and alembic stamp without a lock (optuna/optuna#4621): with four processes
released together by a barrier, plain `RDBStorage` fails in one of them nearly every time on this
machine. `build_storage` opens again when it lost that race.
"""

from __future__ import annotations

import multiprocessing as mp

import optuna

from tuner.config import StorageConfig
from tuner.store.storage import build_storage

PROCESSES = 4
ROUNDS = 4


def _open(url: str, barrier, results) -> None:
    barrier.wait()
    try:
        storage = build_storage(StorageConfig(url=url))
        study = optuna.create_study(study_name="s", storage=storage, load_if_exists=True)
        results.put(("ok", study.study_name))
    except Exception as err:  # reported to the test, which names it
        results.put((type(err).__name__, str(err).splitlines()[0]))


def test_processes_opening_a_fresh_store_together_all_succeed(tmp_path):
    ctx = mp.get_context("fork")
    for round_ in range(ROUNDS):
        url = f"sqlite:///{tmp_path / f'optuna{round_}.db'}"
        barrier, results = ctx.Barrier(PROCESSES), ctx.Queue()
        procs = [ctx.Process(target=_open, args=(url, barrier, results)) for _ in range(PROCESSES)]
        for proc in procs:
            proc.start()
        outcomes = [results.get(timeout=60) for _ in procs]
        for proc in procs:
            proc.join(timeout=60)
        assert outcomes == [("ok", "s")] * PROCESSES, f"round {round_}: {outcomes}"
        assert [s.study_name for s in optuna.get_all_study_summaries(url)] == ["s"]
