"""Capacity, the tuner's objective, simulated and real, per config: issue 12's first accuracy target.

    # on the GPU (~8 min a trace): the simulated capacity first, then the real search, started independently
    python -m experiments.sim_capacity --profile conf/profiles/h200-llama-3-8b.json --windows azure \
        --real-out $OUT/capacity-azure.json --budget-s 480
    # anywhere, from a GPU run's measurements (the simulation is CPU work): compare again
    python -m experiments.sim_capacity --profile conf/profiles/h200-llama-3-8b.json --windows azure \
        --real-in experiments/results/h200-sim/real-azure-base.json \
        experiments/results/h200-sim/real-azure-tiers-1.json \
        --record    # several files: merged by window and config, a later file's config replacing an earlier one's
    #             (a finished search it replaces is kept beside it: the real capacity is their mean)
    # the simulated verdict at every 0.5% step around each capacity (is passing monotone in the rate?)
    python -m experiments.sim_capacity --profile conf/profiles/h200-llama-3-8b.json --windows mooncake --sim-only --scan
    # on a CPU, the tiny model against a small-grid profile made on the spot (mechanics only):
    python -m experiments.sim_capacity --cpu

Capacity is measured exactly as a trial measures it (`tuner.measure.measure`, the default SLO: TTFT 2 s,
TPOT 0.1 s, attainment 0.99): the highest rate scale of the window whose probe passes. The simulated
search (one replay a probe: it is deterministic) brackets from x1 and bisects to 2%. The real one
starts where the tuner's first trial starts, at the window's own rate (x2 steps, squared), never at the
simulated capacity (a real search started there reads "+0%" whenever the real value lies anywhere in its
first bracket), and bisects to 5%, each probe the majority of up to 3 replays, after a 32-request warm-up
burst and one unmeasured replay of the whole window at the start scale (every kernel shape the window uses
compiled before anything is measured). At the real capacity the window is replayed until three whole replays
are in hand (the deciding probe's passing replays count), and the simulator replays it at that same scale:
TTFT and TPOT p50/p99 real (median, min..max) against simulated, at the operating point the tuner would pick.

Beside each simulated capacity, the same search with every predicted step 3% shorter and 3% longer
(`GpuProfile.scaled`): where one request of a small window decides the capacity, a step-time error that
small can move it further than the 10% target, and this column shows how far. Then the simulated capacity
from below (the last 1% step before the first failing one: where passing is not monotone in the rate, a
bisection reports whichever edge its path meets), and at how many of the scales the real searches probed
the simulator gives the same verdict (pass or fail) as the real engine: a check no search path can move.

With --real-out the file is rewritten after every measured replay: a config whose search a call's time limit
cuts keeps its replays so far under `cut` and its logged steps under `rows` (a refit takes them), and the
comparison lists them. `--start tiers=0.48` starts a config's real search at a scale a cut call bracketed.
`--check 0.1` replaces the search to 5% by the same search with one coarse step, from the simulated capacity
/ 1.1 to x1.1 (`check_plan`): a pass then a fail proves the real capacity within 10% of the simulated one in
two probes (about 4 minutes a config on the 100-request Mooncake window, against 7), and the comparison gives
the range of errors that bracket allows.

The shipped profile is refitted with the flash-era steps of both windows (conf/profiles/README.md), so its
figures here are in-sample; experiments/RESULTS.md has the held-out cross-window ones.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from experiments.capacity_compare import capacity_lines
from experiments.capacity_sim import (
    CPU_REQUESTS,
    ORDER,
    POINT,
    SPREAD_REPLAYS,
    quiet,
    sim_capacity,
    sim_passes,
    sim_point,
    slo_for,
)
from experiments.record import add_record_args, emit
from experiments.sim_lab import configs, cpu_profile, engine_config, measure_real, real_runs
from experiments.windows import CAPACITY_WINDOWS, Window, rate_rps, window_requests
from runtime import EngineConfig, GpuProfile, LLMEngine, StepLog, load_profile
from tuner.config import ObjectiveName, SloConfig
from tuner.measure.job import MeasurePlan, ReplaySummary
from tuner.measure.measure import measure
from tuner.measure.metrics import summarize
from tuner.measure.replay import ReplayClock, engine_replay
from tuner.measure.window import WindowReplayer
from tuner.traffic import rebase


def real_plan(start: float, slo: SloConfig, step: float = 1.15, tol: float = 0.05) -> MeasurePlan:
    return MeasurePlan(ObjectiveName.capacity, slo, repeats=3, start_scale=start, first_step=step, tol=tol,
                       warmup_requests=32)


def independent_plan(start: float | None, slo: SloConfig) -> MeasurePlan:
    """The real search: from a scale given (`--start`, x1.15 steps), else from the window's own rate doubling,
    as the tuner's first trial: never from the simulated value it is compared with."""
    return real_plan(start, slo) if start is not None else real_plan(1.0, slo, step=2.0)


def check_plan(sim: float, within: float, slo: SloConfig) -> MeasurePlan:
    """The tuner's search with one coarse step: from sim / (1 + within) up to sim x (1 + within), where a pass
    then a fail proves the real capacity within that band of the simulated one in two probes."""
    step = (1 + within) ** 2
    return real_plan(sim / (1 + within), slo, step, step - 1 + 1e-9)


# ---- the real runs (a GPU, or --cpu) ------------------------------------------------------------------------
def capacity_run(profile: GpuProfile, slo: SloConfig, starts: dict[str, float], check: float | None):
    """Each config's real run: the simulated capacity, the real search (from `starts[cfg]`, else from the window's
    own rate; with `check`, the two-probe check of `check_plan`), the replays at the real capacity. Every replay
    is kept under the config's `cut` (and its steps under `rows`) as it is made, and the file saved."""

    def run(cfg: str, config: EngineConfig, model, requests, record: dict[str, Any], save: Callable[[], None]) -> str:
        sim = sim_capacity(config, profile, requests, slo)
        plan = check_plan(sim.values[0], check, slo) if check is not None else independent_plan(starts.get(cfg), slo)
        meta = {"sim_capacity": sim.values[0], "start": plan.start_scale, **({} if check is None else {"check": check})}
        cut: list[dict] = []  # the search's replays so far: what a call cut by its time limit keeps
        rows: list[list] = []  # and the steps they logged
        record["configs"][cfg] = {"cut": cut, "rows": rows, **meta}
        found = _real_search(config, model, requests, plan, _recorder(cut, rows, save))
        record["configs"][cfg] = {**found, **meta}
        upper = found["upper"]
        return (f"sim x{sim.values[0]:.3f}, real x{found['capacity']:.3f} (fails at "
                f"{'-' if upper is None else f'x{upper:.3f}'})")

    return run


def _recorder(cut: list[dict], rows: list[list], save: Callable[[], None]) -> Callable[[dict, list], None]:
    """Each replay into `cut` and the steps it logged into `rows` (the log only grows once the search has
    started), then the whole file rewritten."""

    def record(summary: dict, logged: list) -> None:
        cut.append(summary)
        rows.extend(list(r) for r in logged[len(rows):])
        save()

    return record


def _real_search(config: EngineConfig, model, requests, plan: MeasurePlan,
                 on_replay: Callable[[dict, list], None]) -> dict[str, Any]:
    """The real search `plan` runs; `on_replay` gets each measured replay's scale, attainment and busy time,
    and the steps logged so far."""
    clock = ReplayClock()
    engine = LLMEngine(config.synchronous(), clock=clock, model=model)
    log = StepLog(engine)  # every step after the warm-up, to check a refit on steps it never saw
    replay_fn = engine_replay(engine, clock)
    replayer = WindowReplayer(replay_fn, requests, plan, quiet, lambda: 0.0)
    replayer.warm_up(plan.warmup_requests)
    replay_fn(rebase(requests, plan.start_scale))  # unmeasured: every kernel shape of the window compiled
    log.rows.clear()

    def logged(scale: float) -> ReplaySummary:
        summary = replayer(scale)
        on_replay({"scale": scale, "attainment": summary.metrics["slo_attainment"],
                   "busy_s": summary.metrics.get("busy_s", 0.0)}, log.rows)
        return summary

    measurement = measure(logged, plan, replayer.span_s)[0]
    capacity = measurement.values[0]
    upper = measurement.metrics["capacity_upper_scale"]
    point = [r.metrics for p in measurement.probes if p.scale == capacity for r in p.replays
             if r.passed and not r.metrics.get("stopped")]
    while capacity > 0 and len(point) < SPREAD_REPLAYS:
        point.append(summarize(replay_fn(rebase(requests, capacity)), plan.slo, 0.0))
    probes = [{"scale": p.scale, "passed": p.passed, "attainment": [r.metrics["slo_attainment"] for r in p.replays],
               "busy_s": [r.metrics.get("busy_s", 0.0) for r in p.replays]} for p in measurement.probes]
    return {"capacity": capacity, "upper": upper if upper != float("inf") else None, "probes": probes,
            "point": [{k: m[k] for k in (*POINT, "slo_attainment", "busy_s")} for m in point],
            "rows": [list(r) for r in log.rows]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu", action="store_true", help="tiny model on CPU, small grid profile made on the spot")
    p.add_argument("--profile", default=None, help="a GPU profile from python -m runtime.profile")
    p.add_argument("--windows", default="azure", help="comma-separated: azure,mooncake,mooncake100")
    p.add_argument("--only", default=None, help="comma-separated config names, in this order")
    p.add_argument("--budget-s", type=float, default=480.0,
                   help="start no config but the first after this many seconds")
    p.add_argument("--start", default=None, metavar="CFG=SCALE,...",
                   help="start these configs' real searches here, not at the simulated capacity")
    p.add_argument("--real-in", nargs="+", default=None,
                   help="compare against these real measurements (one or more files; no model needed)")
    p.add_argument("--real-out", default=None, help="write the real measurements here (JSON)")
    p.add_argument("--out-md", default=None, help="also write the comparison (markdown) here")
    p.add_argument("--check", type=float, default=None, metavar="WITHIN",
                   help="instead of a search to 5%%: probe sim / (1 + WITHIN) and sim x (1 + WITHIN) (e.g. 0.1)")
    p.add_argument("--scan", action="store_true",
                   help="with --sim-only: the simulated verdict at every 0.5%% step from 0.8x to 1.1x the capacity")
    p.add_argument("--sim-only", action="store_true", help="only the simulated capacities (CPU), no real runs")
    add_record_args(p)
    a = p.parse_args()
    profile_path = a.profile or cpu_profile(a.cpu)
    profile = load_profile(profile_path)
    every = configs(a.cpu)
    names = a.only.split(",") if a.only else list(ORDER)
    chosen = {k: every[k] for k in names}
    windows = {k: CAPACITY_WINDOWS[k] for k in a.windows.split(",")}
    if a.sim_only:
        return _sim_only(profile, windows, chosen, a.cpu, a.scan)
    starts = parse_starts(a.start, chosen)
    if starts and a.check is not None:
        raise SystemExit("--start and --check: a check starts at the simulated capacity / (1 + WITHIN); give one")
    run = capacity_run(profile, slo_for(a.cpu), starts, a.check)
    real = real_runs(a, lambda save: measure_real(profile, windows, chosen, a.cpu, CPU_REQUESTS, save, run,
                                                  a.budget_s))
    print(f"profile {profile.label} ({profile_path})", flush=True)
    lines = capacity_lines(profile, real, chosen, a.cpu)
    emit("\n".join(lines), a, f"Capacity simulated vs real ({profile.label}; the real runs: {real['created']})")
    if a.out_md:
        Path(a.out_md).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


def parse_starts(text: str | None, chosen: dict[str, dict]) -> dict[str, float]:
    """`--start base=0.5,tiers=0.48` as {config: scale}; a name not in --only, or a bad scale, is an error."""
    starts: dict[str, float] = {}
    for item in (text or "").split(","):
        if not item:
            continue
        cfg, _, scale = item.partition("=")
        if cfg not in chosen:
            raise SystemExit(f"--start {item!r}: {cfg!r} is not one of the configs measured ({', '.join(chosen)})")
        try:
            starts[cfg] = float(scale)
        except ValueError:
            raise SystemExit(f"--start {item!r}: {scale!r} is not a rate scale") from None
        if starts[cfg] <= 0:
            raise SystemExit(f"--start {item!r}: a rate scale must be above 0")
    return starts


def _sim_only(profile: GpuProfile, windows: dict[str, Window], chosen: dict[str, dict], cpu: bool,
              scan: bool) -> int:
    """The simulated capacities and what the real search would replay (simulated busy seconds)."""
    for name, window in windows.items():
        requests = window_requests(window, profile, cpu, CPU_REQUESTS)
        print(f"{name}: {len(requests)} requests, {rate_rps(requests):.3f} req/s at x1")
        for cfg, knobs in chosen.items():
            config = engine_config(profile, knobs, cpu)
            m = sim_capacity(config, profile, requests, slo_for(cpu))
            busy = sim_point(config, profile, requests, m.values[0])["busy_s"]
            print(f"  {cfg}: x{m.values[0]:.3f} = {m.values[0] * rate_rps(requests):.3f} req/s, "
                  f"{len(m.probes)} probes; a whole replay at capacity: {busy:.1f} s simulated busy")
            if scan:
                scales = [m.values[0] * 0.8 * 1.005**k for k in range(int(np.log(1.1 / 0.8) / np.log(1.005)) + 1)]
                verdicts = [sim_passes(config, profile, requests, slo_for(cpu), x) for x in scales]
                print("    " + " ".join(f"x{x:.3f} {'P' if ok else 'F'}" for x, ok in zip(scales, verdicts)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
