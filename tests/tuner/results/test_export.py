"""Exports load back (runtime and Hydra), vllm.yaml has vLLM's keys, writes are atomic."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata as importlib_metadata
from pathlib import Path

import pytest
import yaml

from runtime import ConfigError, EngineConfig
from tuner.config import load_app_config
from tuner.results.export import ExportError, provenance, write_exports

REPO = Path(__file__).resolve().parents[3]

TUNED = EngineConfig.from_mapping({
    "model": {"name": "llama-3-8b", "dtype": "bfloat16"},
    "cache": {"block_size": 32, "gpu_memory_utilization": 0.85, "kv_cache_dtype": "fp8_e4m3",
              "enable_prefix_caching": False, "watermark": 0.02},
    "scheduler": {"max_num_seqs": 128, "max_num_batched_tokens": 4096, "max_model_len": 8192},
    "kernel": {"qk_clip": 30.0, "flash_min_len": 128, "pad_multiple": 8},
    "seed": 7,
}).to_dict()
TIERS = [{"max_len": 1024, "block_size": 8, "share": 0.3}, {"max_len": 8192, "block_size": 64, "share": 0.7}]
META = {"study": "s1", "trial": 12, "config": "trial 12", "verdict": "improved: +1 req/s",
        "interval": {"mean": 1.0, "low": 0.25, "high": 1.75, "rounds": 6}, "traffic_sha256": "ab" * 32,
        "model": "llama-3-8b", "hardware": "1 x NVIDIA H200",
        **provenance(datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc))}


def _with_tiers(runtime: dict) -> dict:
    return {**runtime, "cache": {**runtime["cache"], "block_tiers": TIERS}}


def test_provenance():
    assert provenance(datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)) == {
        "pagetune_version": importlib_metadata.version("pagetune"), "date": "2025-01-02T03:04:05+00:00"}


def test_best_yaml_loads_back_in_the_runtime(tmp_path):
    paths = write_exports(tmp_path, runtime=_with_tiers(TUNED), metadata=META, report_md="# r\n")
    assert paths.best == tmp_path / "best.yaml"
    loaded = EngineConfig.from_yaml(paths.best)
    assert loaded == EngineConfig.from_mapping({**_with_tiers(TUNED), "metadata": META})
    assert loaded.metadata == META and loaded.cache.block_tiers[1].block_size == 64
    assert paths.best.read_text().startswith("# pagetune runtime config: study s1, trial 12.\n"
                                             "# Verdict: improved: +1 req/s\n")
    assert paths.report.read_text() == "# r\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.yaml", "report.md", "vllm.yaml"]


def test_best_yaml_loads_back_with_hydra_runtime_best(tmp_path, compose):
    exported = write_exports(tmp_path / "conf" / "runtime", runtime=_with_tiers(TUNED), metadata=META,
                             report_md="")
    traffic = tmp_path / "t.jsonl"
    traffic.write_text("{}\n")
    cfg = compose(f"traffic={traffic}", "runtime=best", f"hydra.searchpath=[file://{tmp_path / 'conf'}]")
    assert load_app_config(cfg).runtime == EngineConfig.from_yaml(exported.best)


def test_vllm_yaml_is_the_export_of_tuner_vllm(tmp_path):
    """The vllm.yaml on disk is tuner.vllm's file for the exported config (its rules are tested there)."""
    from tuner.vllm import vllm_yaml

    paths = write_exports(tmp_path, runtime=TUNED, metadata=META, report_md="")
    exported = EngineConfig.from_yaml(paths.best)
    assert paths.vllm.read_text() == vllm_yaml(exported.to_dict()).text
    assert yaml.safe_load(paths.vllm.read_text())["block-size"] == 32
    assert paths.vllm.read_text().splitlines()[1].startswith("# From pagetune study s1, trial 12;")


def test_invalid_exports_write_nothing(tmp_path):
    with pytest.raises(ConfigError, match=r"^cache\.block_size: must be a power of two"):
        write_exports(tmp_path, runtime={"cache": {"block_size": 12}}, metadata={}, report_md="")
    with pytest.raises(ValueError, match=r"^metadata\.command: '\$\{' is not allowed"):
        write_exports(tmp_path, runtime=TUNED, metadata={"command": "run dir=${now:%H}"}, report_md="")
    assert list(tmp_path.iterdir()) == []


def test_nan_metric_is_written_as_null(tmp_path):
    paths = write_exports(tmp_path, runtime=TUNED, metadata={"metrics": {"ttft_p99_s": float("nan")}},
                          report_md="")
    assert EngineConfig.from_yaml(paths.best).metadata == {"metrics": {"ttft_p99_s": None}}


# The child pauses inside its Nth fsync (1: best.yaml's temp file, 2: the folder after best.yaml's
# rename, 3: vllm.yaml's temp file) and is killed there with SIGKILL.
_KILLED_CHILD = """
import os, sys, time
from runtime import EngineConfig
from tuner.results.export import write_exports
calls, real_fsync = [0], os.fsync
def fsync(fd):
    calls[0] += 1
    if calls[0] == int(sys.argv[2]):
        print("paused", flush=True)
        time.sleep(60)
    real_fsync(fd)
os.fsync = fsync
write_exports(sys.argv[1], runtime=EngineConfig().to_dict(), metadata={"study": "new"}, report_md="# r")
"""


@pytest.mark.parametrize(("pause_at", "old", "expect"), [
    (1, False, None),  # killed while staging the set: absent
    (4, True, "old"),  # killed with the set staged, before its renames: an earlier best.yaml stays whole
    (5, False, "new"),  # killed after the renames: complete
])
def test_a_killed_export_leaves_best_yaml_absent_or_complete(tmp_path, pause_at, old, expect):
    if old:
        write_exports(tmp_path, runtime=TUNED, metadata={"study": "old"}, report_md="")
    child = subprocess.Popen([sys.executable, "-c", _KILLED_CHILD, str(tmp_path), str(pause_at)],
                             cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "paused\n"
    finally:
        child.kill()
        child.wait(timeout=30)
    best = tmp_path / "best.yaml"
    if expect is None:
        assert not best.exists()
    else:
        assert EngineConfig.from_yaml(best).metadata == {"study": expect}


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 64 KiB tmpfs (root only; the test is skipped where mounting is not permitted)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


def _set(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(folder.iterdir())}


def _fill(folder: Path) -> None:
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        with pytest.raises(OSError, match="No space left"):
            while True:
                os.write(fd, b"\0" * 4096)
    finally:
        os.close(fd)


def test_a_full_disk_is_one_error_naming_the_path_and_the_old_set_stays(small_tmpfs):
    write_exports(small_tmpfs, runtime=TUNED, metadata=META, report_md="# old\n")
    old = _set(small_tmpfs)
    _fill(small_tmpfs)
    with pytest.raises(ExportError) as err:
        write_exports(small_tmpfs, runtime=TUNED, metadata=META, report_md="# new\n")
    assert str(err.value) == f"cannot write {small_tmpfs}/best.yaml: No space left on device"
    (small_tmpfs / "filler").unlink()
    assert _set(small_tmpfs) == old  # nothing half written, no staging folder left behind


def test_a_read_only_folder_is_one_error_naming_it(small_tmpfs):
    write_exports(small_tmpfs, runtime=TUNED, metadata=META, report_md="# old\n")
    old = _set(small_tmpfs)
    subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], check=True)
    with pytest.raises(ExportError) as err:
        write_exports(small_tmpfs, runtime=TUNED, metadata=META, report_md="# new\n")
    assert str(err.value) == f"cannot write {small_tmpfs}: Read-only file system"
    assert _set(small_tmpfs) == old


def test_a_rename_that_fails_puts_back_the_files_the_set_replaced(tmp_path):
    write_exports(tmp_path, runtime=TUNED, metadata=META, report_md="# old\n")
    old_best = (tmp_path / "best.yaml").read_text()
    (tmp_path / "vllm.yaml").unlink()
    (tmp_path / "vllm.yaml").mkdir()  # best.yaml is renamed first, then vllm.yaml cannot be
    (tmp_path / "vllm.yaml" / "x").write_text("")
    with pytest.raises(ExportError) as err:
        write_exports(tmp_path, runtime={**TUNED, "seed": 8}, metadata=META, report_md="# new\n")
    assert str(err.value) == f"cannot write {tmp_path}/vllm.yaml: Is a directory"
    assert (tmp_path / "best.yaml").read_text() == old_best
    assert (tmp_path / "report.md").read_text() == "# old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.yaml", "report.md", "vllm.yaml"]


@pytest.mark.slow
def test_a_folder_that_cannot_take_the_exports_is_one_line_and_the_trials_stay(tmp_path):
    from tests.tuner.cli import mlflow_runs, run_tuner, study_trials, tuner_args
    from tuner.traffic import SAMPLE_TRAFFIC

    out = tmp_path / "out-t"
    (out / "best.yaml").mkdir(parents=True)  # in the way of the rename (the real faults: the tmpfs tests above)
    (out / "best.yaml" / "keep").write_text("")
    done = run_tuner(tuner_args(tmp_path, SAMPLE_TRAFFIC), cwd=tmp_path)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: cannot write {out}/best.yaml: Is a directory; the trials are kept in sqlite:///{tmp_path}/optuna.db: "
        "rerun the same command once the folder can take the results (the study concludes again)")
    assert [t.state.name for t in study_trials(tmp_path, "t")] == ["COMPLETE", "COMPLETE"]
    assert not (out / "vllm.yaml").exists() and not (out / "report.md").exists()  # the set, or none of it
    _, parents, children = mlflow_runs(tmp_path, "t")
    assert [p.info.status for p in parents] == ["FAILED"] and [c.info.status for c in children] == ["FINISHED"] * 2
