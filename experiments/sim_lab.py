"""What the simulator experiments (`sim_accuracy`, `sim_capacity`, `window_monotone`) share: the configs they
compare, one config simulated, the real runs measured (a GPU, or --cpu) or read back and merged, and the
comparison's frame (a section per window, relative errors, rankings)."""

from __future__ import annotations

import argparse
import gc
import json
import math
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from experiments.windows import Window, base_knobs, rate_rps, window_requests
from runtime import EngineConfig, GpuProfile, VirtualClock, sim_engine
from tuner.config import SloConfig
from tuner.measure.metrics import summarize
from tuner.measure.replay import replay

# (config name, its engine config, the model, the window's requests, the window's record, a save of the whole
# file) -> the console's line; fills record["configs"][name] (and may add to record["rows"])
ConfigRun = Callable[[str, EngineConfig, Any, tuple, dict[str, Any], Callable[[], None]], str]
# (window name, its record, the window, its requests) -> the comparison's lines for it
WindowLines = Callable[[str, dict[str, Any], Window, tuple], list[str]]


def configs(cpu: bool) -> dict[str, dict]:
    """Name -> flat engine knobs over the base."""
    big_seqs, small_seqs = (16, 4) if cpu else (256, 32)
    big_tokens, small_tokens = (512, 128) if cpu else (8192, 2048)
    graphs = {} if cpu else {"cuda_graphs": True}
    tiers = [{"max_len": 256 if cpu else 2048, "block_size": 16, "share": 0.5},
             {"max_len": 1 << 20, "block_size": 32, "share": 0.5}]  # the last tier ends at max_model_len
    return {
        "base": {"max_num_seqs": big_seqs, "max_num_batched_tokens": big_tokens, **graphs},
        "no-graphs": {"max_num_seqs": big_seqs, "max_num_batched_tokens": big_tokens, "cuda_graphs": False},
        "block-32": {"block_size": 32, "max_num_seqs": big_seqs, "max_num_batched_tokens": big_tokens, **graphs},
        "tiers": {"block_tiers": tiers, "max_num_seqs": big_seqs, "max_num_batched_tokens": big_tokens,
                  "cuda_graphs": False},
        "few-seqs": {"max_num_seqs": small_seqs, "max_num_batched_tokens": big_tokens, **graphs},
        "small-budget": {"max_num_seqs": big_seqs, "max_num_batched_tokens": small_tokens, **graphs},
    }


def engine_config(profile: GpuProfile, knobs: dict[str, Any], cpu: bool) -> EngineConfig:
    """One of `configs` (its flat knobs) over the base, for the profile's model."""
    return EngineConfig.from_flat(profile.model, **base_knobs(cpu), **knobs)


def run_sim(config: EngineConfig, profile: GpuProfile, requests) -> tuple[dict, int]:
    """The requests through the simulated engine, whole: their metrics (the default SLO) and the KV blocks."""
    clock = VirtualClock()
    engine = sim_engine(config, profile, clock)
    result = replay(engine, clock, requests)
    return summarize(result, SloConfig(), 0.0), sum(t.num_blocks for t in engine.kv.tiers)


def load_real_model(profile: GpuProfile, cpu: bool):
    """The profile's model with its random weights, on the GPU (or the CPU)."""
    from runtime.model.loader import load_model
    from runtime.placement import resolve_device, resolve_dtype

    device = resolve_device("cpu" if cpu else "auto")
    return load_model(profile.model, resolve_dtype("auto", device), device, 0)


def measure_real(profile: GpuProfile, windows: dict[str, Window], chosen: dict[str, dict], cpu: bool,
                 cpu_requests: int, save: Path | None, run_config: ConfigRun,
                 budget_s: float = math.inf) -> dict[str, Any]:
    """Every window through the real engine, config by config (`run_config`); the file written to `save` after
    every config (and whenever `run_config` saves), so a run cut short keeps what it measured. No config but the
    first is started past `budget_s` (counted from the model's load)."""
    import torch

    model = load_real_model(profile, cpu)
    began, started = time.perf_counter(), 0
    out: dict[str, Any] = {"created": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "windows": {}}
    for name, window in windows.items():
        requests = window_requests(window, profile, cpu, cpu_requests)
        print(f"{name}: {window.describe(len(requests))} ({rate_rps(requests):.3f} req/s at x1)", flush=True)
        record: dict[str, Any] = {"window": window._asdict(), "requests": len(requests),
                                  "rate_rps": rate_rps(requests), "configs": {}, "rows": []}
        out["windows"][name] = record
        for cfg, knobs in chosen.items():
            if started and time.perf_counter() - began > budget_s:
                print(f"  {cfg}: not started (past --budget-s {budget_s:g})", flush=True)
                continue
            start, started = time.perf_counter(), started + 1
            line = run_config(cfg, engine_config(profile, knobs, cpu), model, requests, record,
                              lambda: write_json(save, out))
            print(f"  {cfg}: {line}, {time.perf_counter() - start:.0f} s", flush=True)
            write_json(save, out)
            gc.collect()  # the KV pool (most of the GPU) goes before the next config's engine plans its own
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    return out


def write_json(save: Path | None, out: dict[str, Any]) -> None:
    if save is not None:
        save.write_text(json.dumps(out) + "\n", encoding="utf-8")


def real_runs(a: argparse.Namespace, measure: Callable[[Path | None], dict[str, Any]]) -> dict[str, Any]:
    """The real measurements: read from --real-in (one file or several, merged), or measured now by
    `measure(save path or None)` (--real-out)."""
    if a.real_in:
        return merge_runs([json.loads(Path(f).read_text(encoding="utf-8")) for f in a.real_in])
    if a.cpu:
        import torch

        torch.set_num_threads(1)  # a steadier CPU engine
    return measure(Path(a.real_out) if a.real_out else None)


def merge_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Several device calls' measurements as one: their windows, each window's configs (a later file's config
    replaces an earlier one's; a finished search it replaces is kept in its `earlier` list, and a cut search
    that follows a cut one carries both one's replays and steps), and every file's date."""
    merged: dict[str, Any] = {"created": " and ".join(r["created"] for r in runs), "windows": {}}
    for run in runs:
        for name, data in run["windows"].items():
            fresh = {k: v for k, v in data.items() if k not in ("configs", "rows")}
            into = merged["windows"].setdefault(name, {**fresh, "configs": {}, "rows": []})
            if Window(**into["window"]) != Window(**data["window"]):
                raise SystemExit(f"--real-in: window {name} differs between files: "
                                 f"{into['window']} vs {data['window']}")
            for cfg, run in data["configs"].items():
                old = into["configs"].get(cfg, {})
                if "capacity" not in old and "capacity" not in run and old:  # two cut searches: all their replays
                    run = {**run, "cut": [*old["cut"], *run["cut"]], "rows": [*old["rows"], *run["rows"]]}
                earlier = [*old.pop("earlier", []), *([old] if "capacity" in old else [])]
                into["configs"][cfg] = {**run, "earlier": earlier} if earlier else run
            into["rows"] += data.get("rows", [])
    return merged


def compare(profile: GpuProfile, real: dict[str, Any], cpu: bool, cpu_requests: int,
            window_lines: WindowLines) -> list[str]:
    """The comparison: a section per window of the real runs, its header then `window_lines`."""
    lines: list[str] = []
    for name, data in real["windows"].items():
        window = Window(**data["window"])
        requests = window_requests(window, profile, cpu, cpu_requests)
        lines += [f"### {name}: {window.describe(len(requests))} ({rate_rps(requests):.3f} req/s at x1)", "",
                  *window_lines(name, data, window, requests)]
    return lines


def relative_error(sim: float, real: float) -> str:
    """`+12%`: how far the simulated value is from the real one (n/a without a real value)."""
    return "n/a" if not real or math.isnan(real) or math.isnan(sim) else f"{(sim - real) / real:+.0%}"


def ranking(values: dict[str, float], *, highest_first: bool) -> str:
    """`a > b > c` (highest first) or `a < b < c`: the names ordered by their values."""
    order = sorted(values, key=lambda k: -values[k] if highest_first else values[k])
    return (" > " if highest_first else " < ").join(order)


def cpu_profile(cpu: bool) -> str:
    """A small-grid profile of the tiny model on this CPU, made on the spot (--profile is required otherwise)."""
    if not cpu:
        raise SystemExit("--profile is required on the GPU: python -m runtime.profile model=llama-3-8b out=...")
    from runtime.profile import main as profile_main

    out = Path(tempfile.mkdtemp()) / "tiny.json"
    profile_main(["model=tiny", "grid=small", "device=cpu", f"out={out}", "max_model_len=1024"])
    return str(out)
