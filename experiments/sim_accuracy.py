"""How well the simulator predicts the real runtime: the same trace window through both, per config.

    # on the GPU (after `python -m runtime.profile model=llama-3-8b out=$OUT/h200-llama-3-8b.json`), ~4-5 min:
    python experiments/sim_accuracy.py --profile $OUT/h200-llama-3-8b.json --trace .traces/azure_llm_2023_code.csv \
        --results $OUT/sim_accuracy.md
    # on a CPU, the tiny model against a small-grid profile made on the spot (a minute or two):
    python experiments/sim_accuracy.py --cpu

For each config (block tiers; small and large max_num_seqs; small and large max_num_batched_tokens; CUDA
graphs on and off) the window is replayed open loop at a fixed rate through the real engine (after a
warm-up burst; its steps timed as the profile times them, `tuner.trials.steplog`) and through the
simulated one (`runtime.sim`: the same scheduler and KV manager on the profile's step times): KV blocks,
output throughput, TTFT and TPOT p50/p99 both ways with the relative error, then the configs ranked by
p99 TTFT both ways. Last, the profile refitted with the real steps (`runtime.refit_profile`): its error
and the refit's on every fifth real step, which the refit never saw.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch

from runtime import EngineConfig, LLMEngine, engine_limits
from runtime.model.loader import load_model
from runtime.placement import resolve_device, resolve_dtype
from runtime.sim import VirtualClock, load_profile, refit_profile, sim_engine
from tuner.config import SloConfig
from tuner.traffic import load_traffic, select
from tuner.trials.metrics import summarize
from tuner.trials.replay import ReplayClock, replay
from tuner.trials.steplog import StepLog

METRICS = ("output_tok_s", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s")


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


def run_real(config: EngineConfig, model, requests, slo, warmup: int) -> tuple[dict, int, list]:
    """The window through the real engine after a warm-up burst; its one-tier steps timed (StepLog rows)."""
    clock = ReplayClock()
    engine = LLMEngine(config, clock=clock, model=model)
    replay(engine, clock, tuple(replace(r, arrival_s=0.0) for r in requests[:warmup]))
    log = StepLog(engine)
    metrics = summarize(replay(engine, clock, requests, slo=slo), slo, 0.0)
    blocks = sum(t.num_blocks for t in engine.kv.tiers)
    rows = log.rows
    del engine, log
    gc.collect()  # the KV pool (most of the GPU) goes before the next config's engine plans its own
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return metrics, blocks, rows


def run_sim(config: EngineConfig, profile, requests, slo) -> tuple[dict, int]:
    clock = VirtualClock()
    engine = sim_engine(config, profile, clock)
    return summarize(replay(engine, clock, requests, slo=slo), slo, 0.0), sum(t.num_blocks for t in engine.kv.tiers)


def _err(sim: float, real: float) -> str:
    return "n/a" if not real or np.isnan(real) or np.isnan(sim) else f"{(sim - real) / real:+.0%}"


def table(rows: dict[str, tuple[dict, int, dict, int]]) -> list[str]:
    head = "| config | KV blocks real/sim | " + " | ".join(f"{m} real / sim (err)" for m in METRICS) + " |"
    lines = [head, "|" + "---|" * (2 + len(METRICS))]
    for name, (real, rb, sim, sb) in rows.items():
        cells = [f"{real[m]:.4g} / {sim[m]:.4g} ({_err(sim[m], real[m])})" for m in METRICS]
        lines.append(f"| {name} | {rb} / {sb} | " + " | ".join(cells) + " |")
    real_rank = sorted(rows, key=lambda n: rows[n][0]["ttft_p99_s"])
    sim_rank = sorted(rows, key=lambda n: rows[n][2]["ttft_p99_s"])
    lines += ["", f"ranking by p99 TTFT, real: {' < '.join(real_rank)}",
              f"ranking by p99 TTFT, sim:  {' < '.join(sim_rank)}"]
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu", action="store_true", help="tiny model on CPU, small grid profile made on the spot")
    p.add_argument("--model", default=None, help="default: the profile's model")
    p.add_argument("--profile", default=None, help="a GPU profile from python -m runtime.profile")
    p.add_argument("--trace", default=None, help="default: .traces/ or ../shared/traces/ azure_llm_2023_code.csv")
    p.add_argument("--start-s", type=float, default=600.0)
    p.add_argument("--duration-s", type=float, default=40.0)
    p.add_argument("--time-scale", type=float, default=2.0)
    p.add_argument("--max-requests", type=int, default=None)
    p.add_argument("--warmup", type=int, default=16)
    p.add_argument("--only", default=None, help="comma-separated config names")
    p.add_argument("--results", default=None, help="also write the table (markdown) here")
    a = p.parse_args()
    if a.cpu:
        torch.set_num_threads(1)
    profile_path = a.profile or _cpu_profile(a.cpu)
    profile = load_profile(profile_path)
    model_name = a.model or profile.model
    base = {"device_memory_gb": 0.05, "max_model_len": 1024} if a.cpu else {"max_model_len": 8192}
    device = resolve_device("cpu" if a.cpu else "auto")
    model = load_model(model_name, resolve_dtype("auto", device), device, 0)
    trace = Path(a.trace) if a.trace else _default_trace()
    limit = engine_limits(EngineConfig.from_flat(model_name, **base), profile.info).max_model_len
    traffic = load_traffic(trace, on_error="skip", vocab_size=profile.info.vocab_size, max_model_len=limit,
                           long_prompts="truncate")
    requests = select(traffic.requests, start_s=a.start_s, duration_s=a.duration_s, time_scale=a.time_scale,
                      max_requests=a.max_requests or (40 if a.cpu else None))
    slo = SloConfig()
    chosen = configs(a.cpu)
    if a.only:
        chosen = {k: v for k, v in chosen.items() if k in a.only.split(",")}
    print(f"{len(requests)} requests of {trace.name} from {a.start_s:g} s, {a.duration_s:g} s at x{a.time_scale:g}; "
          f"profile {profile.label} ({profile_path})", flush=True)
    rows, real_steps = {}, []
    for name, knobs in chosen.items():
        start = time.perf_counter()
        config = EngineConfig.from_flat(model_name, **base, **knobs, device=str(device.type))
        real, rb, steps = run_real(config, model, requests, slo, a.warmup)
        sim, sb = run_sim(config, profile, requests, slo)
        real_steps += steps
        rows[name] = (real, rb, sim, sb)
        print(f"  {name}: real {real['output_tok_s']:.1f} tok/s p99 TTFT {real['ttft_p99_s']:.3f} s | sim "
              f"{sim['output_tok_s']:.1f} tok/s p99 TTFT {sim['ttft_p99_s']:.3f} s "
              f"({time.perf_counter() - start:.0f} s)", flush=True)
    lines = table(rows)
    refit = refit_profile(profile, real_steps)
    lines += ["", f"profile fit (as shipped): {profile.fit_error.line()}",
              f"profile on the replays' real steps: {refit.before.line()}",
              f"refit with the real steps: {refit.after.line()}",
              f"median real step {statistics.median(row[-1] for row in real_steps) * 1e3:.2f} ms"
              if real_steps else "no real steps timed"]
    print("\n".join(lines))
    if a.results:
        Path(a.results).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


def _default_trace() -> Path:
    root = Path(__file__).resolve().parents[1]
    for folder in (root / ".traces", root.parent / "shared" / "traces", Path("/work/shared/traces")):
        if (folder / "azure_llm_2023_code.csv").is_file():
            return folder / "azure_llm_2023_code.csv"
    raise SystemExit("no trace found: pass --trace")


def _cpu_profile(cpu: bool) -> str:
    if not cpu:
        raise SystemExit("--profile is required on the GPU: python -m runtime.profile model=llama-3-8b out=...")
    from runtime.profile import main as profile_main

    out = Path(tempfile.mkdtemp()) / "tiny.json"
    profile_main(["model=tiny", "grid=small", "device=cpu", f"out={out}", "max_model_len=1024"])
    return str(out)


if __name__ == "__main__":
    sys.exit(main())
