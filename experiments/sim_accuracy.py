"""How well the simulator predicts the real runtime: the same trace windows through both, per config.

    # on the GPU (after `python -m runtime.profile model=llama-3-8b ...`), ~6 min: measure and compare
    python experiments/sim_accuracy.py --profile conf/profiles/h200-llama-3-8b.json --real-out $OUT/real.json \
        --out-md $OUT/sim_accuracy.md --refit-out $OUT/h200-llama-3-8b.refit.json
    # anywhere, from a GPU run's measurements (the simulation is CPU work): compare again
    python experiments/sim_accuracy.py --profile conf/profiles/h200-llama-3-8b.json \
        --real-in $OUT/real.json --record
    # on a CPU, the tiny model against a small-grid profile made on the spot (a minute or two):
    python experiments/sim_accuracy.py --cpu

Windows: the Azure code trace (from 600 s, 30 s at x2: overloaded) and the Mooncake trace (from 100 s,
12 s at x1: long shared-prefix prompts, truncated to max_model_len). For each config (block tiers; small
and large max_num_seqs; small and large max_num_batched_tokens; CUDA graphs on and off) each window is
replayed open loop through the real engine after a warm-up burst, its steps logged (device and host
time, `runtime.step_log`), and through the simulated one (`runtime.sim`: the same scheduler and KV
manager on the profile's step times). The table gives KV blocks, output throughput, TTFT and TPOT p50/p99
real / simulated with the shipped profile / simulated with the profile calibrated on the OTHER window's
real steps (`runtime.refit_profile`: step-time coefficients and the host model; held out, since it
never saw this window), each with its relative error, then the configs ranked by p99 TTFT each way.
`--refit-out` writes the profile refitted on every window's real steps.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from bench_decode import add_record_args, emit

from runtime import EngineConfig, GpuProfile, engine_limits, refit_profile, save_profile
from runtime.sim import VirtualClock, load_profile, sim_engine
from tuner.config import SloConfig
from tuner.measure.metrics import summarize
from tuner.measure.replay import replay
from tuner.traffic import load_traffic, select

METRICS = ("output_tok_s", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s")
ROOT = Path(__file__).resolve().parents[1]


class Window(NamedTuple):
    trace: str  # file name under .traces/ or ../shared/traces/
    start_s: float
    duration_s: float
    time_scale: float


WINDOWS = {"azure": Window("azure_llm_2023_code.csv", 600.0, 30.0, 2.0),
           "mooncake": Window("mooncake_fast25_synthetic_trace.jsonl", 100.0, 12.0, 1.0)}


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


def base_knobs(cpu: bool) -> dict[str, Any]:
    return {"device_memory_gb": 0.05, "max_model_len": 1024, "device": "cpu"} if cpu else {"max_model_len": 8192}


def engine_config(profile: GpuProfile, knobs: dict[str, Any], cpu: bool) -> EngineConfig:
    """One of `configs` (its flat knobs) over the base, for the profile's model."""
    return EngineConfig.from_flat(profile.model, **base_knobs(cpu), **knobs)


def window_requests(name: str, window: Window, profile: GpuProfile, cpu: bool) -> tuple:
    return select(trace_requests(window.trace, profile, cpu), start_s=window.start_s, duration_s=window.duration_s,
                  time_scale=window.time_scale, max_requests=40 if cpu else None)


def trace_requests(trace: str, profile: GpuProfile, cpu: bool) -> tuple:
    """A shared trace's requests as the profile's model takes them (long prompts truncated to its limit)."""
    limit = engine_limits(EngineConfig.from_flat(profile.model, **base_knobs(cpu)), profile.info).max_model_len
    return load_traffic(_trace(trace), on_error="skip", vocab_size=profile.info.vocab_size, max_model_len=limit,
                        long_prompts="truncate").requests


def load_real_model(profile: GpuProfile, cpu: bool):
    """The profile's model with its random weights, on the GPU (or the CPU)."""
    from runtime.model.loader import load_model
    from runtime.placement import resolve_device, resolve_dtype

    device = resolve_device("cpu" if cpu else "auto")
    return load_model(profile.model, resolve_dtype("auto", device), device, 0)


# ---- the real runs (needs the model: a GPU, or --cpu) -------------------------------------------------------
def measure_real(profile: GpuProfile, windows: dict[str, Window], chosen: dict[str, dict], cpu: bool,
                 warmup: int, save: Path | None) -> dict[str, Any]:
    """Every window through the real engine per config: metrics, KV blocks, and the logged steps (written
    to `save` after every config, so a run cut short keeps what it measured)."""
    import torch

    model = load_real_model(profile, cpu)
    out: dict[str, Any] = {"created": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "windows": {}}
    for name, window in windows.items():
        requests = window_requests(name, window, profile, cpu)
        print(f"{name}: {len(requests)} requests of {window.trace} from {window.start_s:g} s, "
              f"{window.duration_s:g} s at x{window.time_scale:g}", flush=True)
        runs: dict[str, Any] = {}
        rows: list[list] = []
        out["windows"][name] = {"window": window._asdict(), "requests": len(requests), "configs": runs,
                                "rows": rows}
        for cfg, knobs in chosen.items():
            start = time.perf_counter()
            config = engine_config(profile, knobs, cpu)
            metrics, blocks, steps = _real_run(config, model, requests, warmup)
            runs[cfg] = {"metrics": metrics, "blocks": blocks}
            rows += [list(r) for r in steps]
            print(f"  {cfg}: real {metrics['output_tok_s']:.1f} tok/s, p99 TTFT {metrics['ttft_p99_s']:.3f} s "
                  f"({time.perf_counter() - start:.0f} s)", flush=True)
            if save is not None:
                save.write_text(json.dumps(out) + "\n", encoding="utf-8")
            gc.collect()  # the KV pool (most of the GPU) goes before the next config's engine plans its own
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    return out


def _real_run(config: EngineConfig, model, requests, warmup: int) -> tuple[dict, int, list]:
    from dataclasses import replace

    from runtime import LLMEngine, StepLog
    from tuner.measure.replay import ReplayClock

    clock = ReplayClock()
    engine = LLMEngine(config, clock=clock, model=model)
    replay(engine, clock, tuple(replace(r, arrival_s=0.0) for r in requests[:warmup]))
    log = StepLog(engine)
    metrics = summarize(replay(engine, clock, requests), SloConfig(), 0.0)
    return metrics, sum(t.num_blocks for t in engine.kv.tiers), log.rows


# ---- the comparison (CPU work) ------------------------------------------------------------------------------
def run_sim(config: EngineConfig, profile: GpuProfile, requests) -> tuple[dict, int]:
    clock = VirtualClock()
    engine = sim_engine(config, profile, clock)
    result = replay(engine, clock, requests)
    return summarize(result, SloConfig(), 0.0), sum(t.num_blocks for t in engine.kv.tiers)


def compare(profile: GpuProfile, real: dict[str, Any], chosen: dict[str, dict], cpu: bool) -> tuple[list[str], Any]:
    """The comparison's lines, and the profile refitted on every real step (None without any)."""
    lines = []
    names = list(real["windows"])
    for name in names:
        data = real["windows"][name]
        window = Window(**data["window"])
        requests = window_requests(name, window, profile, cpu)
        others = [r for other in names if other != name for r in real["windows"][other]["rows"]]
        calibrated = refit_profile(profile, others).profile if others else None
        rows = {}
        for cfg in chosen:
            if cfg not in data["configs"]:
                continue
            config = engine_config(profile, chosen[cfg], cpu)
            sim, sb = run_sim(config, profile, requests)
            cal = run_sim(config, calibrated, requests)[0] if calibrated else None
            rows[cfg] = (data["configs"][cfg]["metrics"], data["configs"][cfg]["blocks"], sim, sb, cal)
        lines += [f"### {name}: {len(requests)} requests of {window.trace} from {window.start_s:g} s, "
                  f"{window.duration_s:g} s at x{window.time_scale:g}", "",
                  *table(rows, [o for o in names if o != name]), ""]
    every = [r for name in names for r in real["windows"][name]["rows"]]
    refit = refit_profile(profile, every) if every else None
    if refit is not None:
        lines += [f"profile fit (as shipped): {profile.fit_error.line()}",
                  f"shipped profile on the replays' real steps: {refit.before.line()}",
                  f"refit with every real step: {refit.after.line()}",
                  f"host time per step, measured: {refit.host.line() if refit.host else 'not logged'}",
                  f"median real step (forward and sampling) {statistics.median(r[5] for r in every) * 1e3:.2f} ms"]
    return lines, refit


def _err(sim: float, real: float) -> str:
    return "n/a" if not real or np.isnan(real) or np.isnan(sim) else f"{(sim - real) / real:+.0%}"


def table(rows: dict[str, tuple], calibrated_on: list[str]) -> list[str]:
    cal = bool(calibrated_on) and all(r[4] is not None for r in rows.values())
    each = "real / sim (err)" + (" / calibrated (err)" if cal else "")
    head = "| config | KV blocks real/sim | " + " | ".join(f"{m}: {each}" for m in METRICS) + " |"
    lines = [head, "|" + "---|" * (2 + len(METRICS))]
    for name, (real, rb, sim, sb, calib) in rows.items():
        cells = []
        for m in METRICS:
            cell = f"{real[m]:.4g} / {sim[m]:.4g} ({_err(sim[m], real[m])})"
            if cal:
                cell += f" / {calib[m]:.4g} ({_err(calib[m], real[m])})"
            cells.append(cell)
        lines.append(f"| {name} | {rb} / {sb} | " + " | ".join(cells) + " |")
    lines += ["", f"ranking by p99 TTFT, real: {_rank(rows, 0)}", f"ranking by p99 TTFT, sim:  {_rank(rows, 2)}"]
    if cal:
        lines += [f"ranking by p99 TTFT, calibrated: {_rank(rows, 4)}",
                  f"(calibrated: the profile refitted on the real steps of {', '.join(calibrated_on)} only)"]
    return lines


def _rank(rows: dict[str, tuple], at: int) -> str:
    return " < ".join(sorted(rows, key=lambda n: rows[n][at]["ttft_p99_s"]))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu", action="store_true", help="tiny model on CPU, small grid profile made on the spot")
    p.add_argument("--profile", default=None, help="a GPU profile from python -m runtime.profile")
    p.add_argument("--windows", default=None, help="comma-separated: azure,mooncake (default both; azure on --cpu)")
    p.add_argument("--only", default=None, help="comma-separated config names")
    p.add_argument("--warmup", type=int, default=16)
    p.add_argument("--real-in", nargs="+", default=None,
                   help="compare against these real measurements (one or more files; no model needed)")
    p.add_argument("--real-out", default=None, help="write the real measurements here (JSON)")
    p.add_argument("--refit-out", default=None, help="write the profile refitted on every real step here")
    p.add_argument("--out-md", default=None, help="also write the comparison (markdown) here")
    add_record_args(p)
    a = p.parse_args()
    profile_path = a.profile or _cpu_profile(a.cpu)
    profile = load_profile(profile_path)
    chosen = configs(a.cpu)
    if a.only:
        chosen = {k: v for k, v in chosen.items() if k in a.only.split(",")}
    windows = {k: WINDOWS[k] for k in (a.windows or ("azure" if a.cpu else "azure,mooncake")).split(",")}
    real = real_runs(a, lambda save: measure_real(profile, windows, chosen, a.cpu, a.warmup, save))
    print(f"profile {profile.label} ({profile_path})", flush=True)
    lines, refit = compare(profile, real, chosen, a.cpu)
    emit("\n".join(lines), a, f"Simulated vs real ({profile.label}; the real runs: {real['created']})")
    if a.refit_out and refit is not None:
        print(f"wrote {save_profile(refit.profile, a.refit_out)}")
    if a.out_md:
        Path(a.out_md).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


def real_runs(a: argparse.Namespace, measure: Any) -> dict[str, Any]:
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
            if into["window"] != data["window"]:
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


def _trace(name: str) -> Path:
    for folder in (ROOT / ".traces", ROOT.parent / "shared" / "traces", Path("/work/shared/traces")):
        if (folder / name).is_file():
            return folder / name
    raise SystemExit(f"no trace {name} under .traces/ or ../shared/traces/")


def _cpu_profile(cpu: bool) -> str:
    if not cpu:
        raise SystemExit("--profile is required on the GPU: python -m runtime.profile model=llama-3-8b out=...")
    from runtime.profile import main as profile_main

    out = Path(tempfile.mkdtemp()) / "tiny.json"
    profile_main(["model=tiny", "grid=small", "device=cpu", f"out={out}", "max_model_len=1024"])
    return str(out)


if __name__ == "__main__":
    sys.exit(main())
