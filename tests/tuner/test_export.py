"""Exports load back (runtime and Hydra), vllm.yaml has vLLM's keys, writes are atomic; report.md lines."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata as importlib_metadata
from pathlib import Path

import pytest
import yaml

from runtime.config import ConfigError, EngineConfig
from tuner.config import load_app_config
from tuner.export import build_metadata, vllm_args, write_exports
from tuner.report import ReportInputs, render_report

REPO = Path(__file__).resolve().parents[2]

TUNED = EngineConfig.from_mapping({
    "model": {"name": "llama-3-8b", "dtype": "bfloat16"},
    "cache": {"block_size": 32, "gpu_memory_utilization": 0.85, "kv_cache_dtype": "fp8_e4m3",
              "enable_prefix_caching": False, "watermark": 0.02},
    "scheduler": {"max_num_seqs": 128, "max_num_batched_tokens": 4096, "max_model_len": 8192},
    "kernel": {"qk_clip": 30.0, "flash_min_len": 128, "pad_multiple": 8},
    "seed": 7,
}).to_dict()
TIERS = [{"max_len": 1024, "block_size": 8, "share": 0.3}, {"max_len": 8192, "block_size": 64, "share": 0.7}]
META = build_metadata(study="s1", trial=12, metrics={"goodput_rps": 3.5, "ttft_p99_s": 0.25},
                      traffic_sha256="ab" * 32, model="llama-3-8b", hardware="1 x NVIDIA H200",
                      now=datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc))


def _with_tiers(runtime: dict) -> dict:
    return {**runtime, "cache": {**runtime["cache"], "block_tiers": TIERS}}


def test_metadata():
    expected = {"study": "s1", "trial": 12, "metrics": {"goodput_rps": 3.5, "ttft_p99_s": 0.25},
                "traffic_sha256": "ab" * 32, "model": "llama-3-8b", "hardware": "1 x NVIDIA H200",
                "pagetune_version": importlib_metadata.version("pagetune"), "date": "2025-01-02T03:04:05+00:00"}
    assert expected == META


def test_best_yaml_loads_back_in_the_runtime(tmp_path):
    paths = write_exports(tmp_path, runtime=_with_tiers(TUNED), metadata=META, report_md="# r\n")
    assert paths.best == tmp_path / "best.yaml"
    loaded = EngineConfig.from_yaml(paths.best)
    assert loaded == EngineConfig.from_mapping({**_with_tiers(TUNED), "metadata": META})
    assert loaded.metadata == META and loaded.cache.block_tiers[1].block_size == 64
    assert paths.best.read_text().startswith("# pagetune best runtime config: study s1, trial 12.\n")
    assert paths.report.read_text() == "# r\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.yaml", "report.md", "vllm.yaml"]


def test_best_yaml_loads_back_with_hydra_runtime_best(tmp_path, compose):
    exported = write_exports(tmp_path / "conf" / "runtime", runtime=_with_tiers(TUNED), metadata=META,
                             report_md="")
    traffic = tmp_path / "t.jsonl"
    traffic.write_text("{}\n")
    cfg = compose(f"traffic={traffic}", "runtime=best", f"hydra.searchpath=[file://{tmp_path / 'conf'}]")
    assert load_app_config(cfg).runtime == EngineConfig.from_yaml(exported.best)


def test_vllm_yaml_keys(tmp_path):
    paths = write_exports(tmp_path, runtime=TUNED, metadata=META, report_md="")
    assert yaml.safe_load(paths.vllm.read_text()) == {
        "model": "llama-3-8b", "dtype": "bfloat16", "block-size": 32, "gpu-memory-utilization": 0.85,
        "kv-cache-dtype": "fp8_e4m3", "enable-prefix-caching": False, "max-num-seqs": 128,
        "max-num-batched-tokens": 4096, "enable-chunked-prefill": True, "max-model-len": 8192,
        "scheduling-policy": "fcfs", "seed": 7,
    }
    lines = paths.vllm.read_text().splitlines()
    assert lines[0] == "# vllm serve --config vllm.yaml   (pagetune study s1, trial 12)"
    tail = lines[lines.index("# Not set (null in pagetune), so vLLM uses its own default:"):]
    assert tail == [
        "# Not set (null in pagetune), so vLLM uses its own default:",
        "#   num-gpu-blocks-override",
        "",
        "# pagetune knobs with no vLLM equivalent:",
        "#   model.seed: 0",
        "#   cache.block_tiers: []",
        "#   cache.device_memory_gb: null",
        "#   cache.swap_space: 0.0",
        "#   cache.watermark: 0.02",
        '#   scheduler.preemption_mode: "recompute"',
        '#   kernel.attention_backend: "auto"',
        "#   kernel.flash_min_len: 128",
        "#   kernel.split_kv_min_len: 2048",
        "#   kernel.qk_clip: 30.0",
        "#   kernel.pad_multiple: 8",
        "#   kernel.cuda_graphs: false",
        "#   kernel.sampler_half_topk: false",
        '#   device: "auto"',
        "#   debug_integrity: false",
    ]


def test_vllm_args_without_an_equivalent():
    runtime = _with_tiers(TUNED)
    runtime["cache"] = {**runtime["cache"], "kv_cache_dtype": "float32"}
    split = vllm_args(EngineConfig.from_mapping(runtime))
    assert "block-size" not in split.args and "kv-cache-dtype" not in split.args
    assert split.unmapped["cache.block_size"] == 32 and split.unmapped["cache.kv_cache_dtype"] == "float32"
    assert split.unmapped["cache.block_tiers"] == TIERS


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
from runtime.config import EngineConfig
from tuner.export import write_exports
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
    (1, False, None),  # killed before best.yaml's rename: absent
    (1, True, "old"),  # ... an earlier best.yaml stays whole
    (3, False, "new"),  # killed after it: complete
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


# --- report.md ------------------------------------------------------------------------------------

def _report_inputs(**changes) -> ReportInputs:
    fields = dict(
        study_name="demo", best_trial=7, baseline_trial=0,
        best_params={"use_tiers": False, "block_size": 32, "max_num_seqs": 64, "watermark": 0.02},
        baseline_params={"use_tiers": False, "block_size": 16, "max_num_seqs": 64, "watermark": 0.01,
                         "max_num_batched_tokens": None},
        windows={
            "search": {"baseline": [{"goodput_rps": 1.0, "ttft_p99_s": 0.5}],
                       "best": [{"goodput_rps": 1.25, "ttft_p99_s": 0.4}]},
            "validation": {"baseline": [{"goodput_rps": 1.0, "ttft_p99_s": 0.5, "extra": 2.0},
                                        {"goodput_rps": 1.2, "ttft_p99_s": 0.7, "extra": 2.0}],
                           "best": [{"goodput_rps": 1.5, "ttft_p99_s": 0.3, "extra": 3.0},
                                    {"goodput_rps": 1.3, "ttft_p99_s": 0.5, "extra": 3.0}]},
        },
        max_model_len_candidates=[(2048, 0.05), (4096, 0.0125)],
        reproduce_command="python -m tuner +traffic=logs.jsonl tuner.study_name=demo",
        notes=["2 trials pruned"],
    )
    return ReportInputs(**{**fields, **changes})


def test_report_lines():
    assert render_report(_report_inputs()).splitlines() == [
        "# pagetune report: study `demo`",
        "",
        "Best: trial 7. Baseline: trial 0 (the runtime config as composed, run first).",
        "",
        "- Goodput, search window: 1 -> 1.25 req/s (+25.0% better)",
        "- Goodput, validation window: 1.1 -> 1.4 req/s (+27.3% better)",
        "",
        "## Configuration",
        "",
        "Knobs that differ are in bold.",
        "",
        "| knob | baseline | best |",
        "|---|---|---|",
        "| use_tiers | false | false |",
        "| block_size | 16 | **32** |",
        "| max_num_seqs | 64 | 64 |",
        "| watermark | 0.01 | **0.02** |",
        "| max_num_batched_tokens | null | **-** |",
        "",
        "## Metrics: search window",
        "",
        "Mean over repeats (baseline 1, best 1); min..max when repeated.",
        "",
        "| metric | baseline | best | change |",
        "|---|---|---|---|",
        "| goodput_rps | 1 | 1.25 | +25.0% better |",
        "| ttft_p99_s | 0.5 | 0.4 | -20.0% better |",
        "",
        "## Metrics: validation window",
        "",
        "Mean over repeats (baseline 2, best 2); min..max when repeated.",
        "",
        "| metric | baseline | best | change |",
        "|---|---|---|---|",
        "| goodput_rps | 1.1 (1..1.2) | 1.4 (1.3..1.5) | +27.3% better |",
        "| ttft_p99_s | 0.6 (0.5..0.7) | 0.4 (0.3..0.5) | -33.3% better |",
        "| extra | 2 (2..2) | 3 (3..3) | +50.0% |",
        "",
        "## max_model_len candidates",
        "",
        "From the traffic's prompt + output lengths: longer requests are rejected.",
        "",
        "| max_model_len | requests rejected |",
        "|---|---|",
        "| 2048 | 5.00% |",
        "| 4096 | 1.25% |",
        "",
        "## Reproduce and review",
        "",
        "```",
        "python -m tuner +traffic=logs.jsonl tuner.study_name=demo",
        "mlflow ui --backend-store-uri sqlite:///mlflow.db",
        "```",
        "",
        "## Notes",
        "",
        "- 2 trials pruned",
    ]


def test_report_when_the_baseline_wins():
    windows = {"search": {"baseline": [{"goodput_rps": 2.0, "preemptions": 0.0}],
                          "best": [{"goodput_rps": 2.0, "preemptions": 3.0}]}}
    text = render_report(_report_inputs(best_trial=0, windows=windows, max_model_len_candidates=(), notes=()))
    assert "The baseline itself is the best configuration found." in text.splitlines()
    assert "| preemptions | 0 | 3 | - |" in text.splitlines()
    assert "- Goodput, search window: 2 -> 2 req/s (+0.0%)" in text.splitlines()
    assert "## max_model_len candidates" not in text and "## Notes" not in text


def test_report_needs_both_configs_in_every_window():
    with pytest.raises(ValueError, match=r"^windows\['search'\]\['best'\]: needs at least one repeat$"):
        _report_inputs(windows={"search": {"baseline": [{"goodput_rps": 1.0}], "best": []}})
