"""How well the simulator predicts the real runtime: the same trace windows through both, per config.

    # on the GPU (after `python -m runtime.profile model=llama-3-8b ...`), ~6 min: measure and compare
    python -m experiments.sim_accuracy --profile conf/profiles/h200-llama-3-8b.json --real-out $OUT/real.json \
        --out-md $OUT/sim_accuracy.md --refit-out $OUT/h200-llama-3-8b.refit.json
    # anywhere, from a GPU run's measurements (the simulation is CPU work): compare again
    python -m experiments.sim_accuracy --profile conf/profiles/h200-llama-3-8b.json \
        --real-in $OUT/real.json --record
    # on a CPU, the tiny model against a small-grid profile made on the spot (a minute or two):
    python -m experiments.sim_accuracy --cpu

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
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from experiments.record import add_record_args, emit
from experiments.sim_lab import (
    compare,
    configs,
    cpu_profile,
    engine_config,
    measure_real,
    ranking,
    real_runs,
    relative_error,
    run_sim,
)
from experiments.windows import ACCURACY_WINDOWS, Window
from runtime import EngineConfig, GpuProfile, LLMEngine, StepLog, load_profile, refit_profile, save_profile
from tuner.config import SloConfig
from tuner.measure.metrics import summarize
from tuner.measure.replay import ReplayClock, replay

METRICS = ("output_tok_s", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s")
CPU_REQUESTS = 40  # of a window on --cpu


# ---- the real runs (needs the model: a GPU, or --cpu) -------------------------------------------------------
def latency_run(warmup: int):
    """Each config's real run: the window replayed after a warm-up burst, its metrics, KV blocks and logged steps
    (the steps into the window's `rows`)."""

    def run(cfg: str, config: EngineConfig, model, requests, record: dict[str, Any], _save) -> str:
        metrics, blocks, steps = _real_run(config, model, requests, warmup)
        record["configs"][cfg] = {"metrics": metrics, "blocks": blocks}
        record["rows"] += [list(r) for r in steps]
        return f"real {metrics['output_tok_s']:.1f} tok/s, p99 TTFT {metrics['ttft_p99_s']:.3f} s"

    return run


def _real_run(config: EngineConfig, model, requests, warmup: int) -> tuple[dict, int, list]:
    clock = ReplayClock()
    engine = LLMEngine(config.synchronous(), clock=clock, model=model)
    replay(engine, clock, tuple(replace(r, arrival_s=0.0) for r in requests[:warmup]))
    log = StepLog(engine)
    metrics = summarize(replay(engine, clock, requests), SloConfig(), 0.0)
    return metrics, sum(t.num_blocks for t in engine.kv.tiers), log.rows


# ---- the comparison (CPU work) ------------------------------------------------------------------------------
def accuracy_lines(profile: GpuProfile, real: dict[str, Any], chosen: dict[str, dict],
                   cpu: bool) -> tuple[list[str], Any]:
    """The comparison's lines, and the profile refitted on every real step (None without any)."""
    names = list(real["windows"])

    def window_lines(name: str, data: dict[str, Any], window: Window, requests: tuple) -> list[str]:
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
        return [*table(rows, [o for o in names if o != name]), ""]

    lines = compare(profile, real, cpu, CPU_REQUESTS, window_lines)
    every = [r for name in names for r in real["windows"][name]["rows"]]
    refit = refit_profile(profile, every) if every else None
    if refit is not None:
        lines += [f"profile fit (as shipped): {profile.fit_error.line()}",
                  f"shipped profile on the replays' real steps: {refit.before.line()}",
                  f"refit with every real step: {refit.after.line()}",
                  f"host time per step, measured: {refit.host.line() if refit.host else 'not logged'}",
                  f"median real step (forward and sampling) {statistics.median(r[5] for r in every) * 1e3:.2f} ms"]
    return lines, refit


def table(rows: dict[str, tuple], calibrated_on: list[str]) -> list[str]:
    cal = bool(calibrated_on) and all(r[4] is not None for r in rows.values())
    each = "real / sim (err)" + (" / calibrated (err)" if cal else "")
    head = "| config | KV blocks real/sim | " + " | ".join(f"{m}: {each}" for m in METRICS) + " |"
    lines = [head, "|" + "---|" * (2 + len(METRICS))]
    for name, (real, rb, sim, sb, calib) in rows.items():
        cells = []
        for m in METRICS:
            cell = f"{real[m]:.4g} / {sim[m]:.4g} ({relative_error(sim[m], real[m])})"
            if cal:
                cell += f" / {calib[m]:.4g} ({relative_error(calib[m], real[m])})"
            cells.append(cell)
        lines.append(f"| {name} | {rb} / {sb} | " + " | ".join(cells) + " |")
    lines += ["", f"ranking by p99 TTFT, real: {_p99_ranking(rows, 0)}",
              f"ranking by p99 TTFT, sim:  {_p99_ranking(rows, 2)}"]
    if cal:
        lines += [f"ranking by p99 TTFT, calibrated: {_p99_ranking(rows, 4)}",
                  f"(calibrated: the profile refitted on the real steps of {', '.join(calibrated_on)} only)"]
    return lines


def _p99_ranking(rows: dict[str, tuple], at: int) -> str:
    return ranking({name: row[at]["ttft_p99_s"] for name, row in rows.items()}, highest_first=False)


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
    profile_path = a.profile or cpu_profile(a.cpu)
    profile = load_profile(profile_path)
    chosen = configs(a.cpu)
    if a.only:
        chosen = {k: v for k, v in chosen.items() if k in a.only.split(",")}
    windows = {k: ACCURACY_WINDOWS[k] for k in (a.windows or ("azure" if a.cpu else "azure,mooncake")).split(",")}
    real = real_runs(a, lambda save: measure_real(profile, windows, chosen, a.cpu, CPU_REQUESTS, save,
                                                  latency_run(a.warmup)))
    print(f"profile {profile.label} ({profile_path})", flush=True)
    lines, refit = accuracy_lines(profile, real, chosen, a.cpu)
    emit("\n".join(lines), a, f"Simulated vs real ({profile.label}; the real runs: {real['created']})")
    if a.refit_out and refit is not None:
        print(f"wrote {save_profile(refit.profile, a.refit_out)}")
    if a.out_md:
        Path(a.out_md).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
