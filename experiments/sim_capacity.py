"""Capacity, the tuner's objective, simulated and real, per config: issue 12's first accuracy target.

    # on the GPU (~8 min a trace): the simulated capacity first, then the real search starting there
    python experiments/sim_capacity.py --profile conf/profiles/h200-llama-3-8b.json --windows azure \
        --real-out $OUT/capacity-azure.json --budget-s 480
    # anywhere, from a GPU run's measurements (the simulation is CPU work): compare again
    python experiments/sim_capacity.py --profile conf/profiles/h200-llama-3-8b.json --windows azure \
        --real-in experiments/results/h200-sim/capacity-azure.json experiments/results/h200-sim/capacity6-azure.json \
        --record    # several files: merged by window and config, a later file's config replacing an earlier one's
    #             (a finished search it replaces is kept beside it: the real capacity is their mean)
    # the simulated verdict at every 0.5% step around each capacity (is passing monotone in the rate?)
    python experiments/sim_capacity.py --profile conf/profiles/h200-llama-3-8b.json --windows mooncake --sim-only --scan
    # on a CPU, the tiny model against a small-grid profile made on the spot (mechanics only):
    python experiments/sim_capacity.py --cpu

Capacity is measured exactly as a trial measures it (`tuner.trials.measure`, the default SLO: TTFT 2 s,
TPOT 0.1 s, attainment 0.99): the highest rate scale of the window whose probe passes. The simulated
search (one replay a probe: it is deterministic) brackets from x1 and bisects to 2%. The real one
starts at the simulated capacity (x1.15 steps, squared) and bisects to 5%, each probe the majority of up
to 3 replays, after a 32-request warm-up burst and one unmeasured replay of the whole window at the
start scale (every kernel shape the window uses compiled before anything is measured). At the real
capacity the window is replayed until three whole replays are in hand (the deciding probe's passing
replays count), and the simulator replays it at that same scale: TTFT and TPOT p50/p99 real (median,
min..max) against simulated, at the operating point the tuner would pick.

Beside each simulated capacity, the same search with every predicted step 3% shorter and 3% longer
(`GpuProfile.scaled`): where one request of a small window decides the capacity, a step-time error that
small can move it further than the 10% target, and this column shows how far. Then the simulated capacity
from below (the last 1% step before the first failing one: where passing is not monotone in the rate, a
bisection reports whichever edge its path meets), and at how many of the scales the real searches probed
the simulator gives the same verdict (pass or fail) as the real engine: a check no search path can move.

With --real-out the file is rewritten after every measured replay: a config whose search a call's time limit
cuts keeps its replays so far under `cut` and its logged steps under `rows` (a refit takes them), and the
comparison lists them. `--start tiers=0.48` starts a config's real search at a scale a cut call bracketed.

The shipped profile is refitted with the flash-era steps of both windows (conf/profiles/README.md), so its
figures here are in-sample; experiments/RESULTS.md has the held-out cross-window ones.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_decode import add_record_args, emit
from sim_accuracy import _cpu_profile, _err, configs, engine_config, load_real_model, real_runs, run_sim, trace_requests

from runtime import EngineConfig, GpuProfile
from runtime.sim import VirtualClock, load_profile, sim_engine
from runtime.sim.refit import step_samples, tier_steps
from tuner.config import ObjectiveName, SloConfig
from tuner.traffic import rebase, select
from tuner.trials.job import Measurement, MeasurePlan, ReplaySummary
from tuner.trials.measure import WindowReplayer, measure
from tuner.trials.metrics import summarize
from tuner.trials.replay import replay
from tuner.trials.replayer import engine_replay

POINT = ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "output_tok_s")
ORDER = ("base", "small-budget", "no-graphs", "few-seqs", "tiers", "block-32")  # most telling first
SPREAD_REPLAYS = 3
# every predicted step 3% shorter, then longer: how far a step-time error that small moves the simulated capacity
# (the edge where one request of the window misses its SLO can move far more than 3%)
SENSITIVITY = (0.97, 1.03)


class CapWindow(NamedTuple):
    trace: str
    start_s: float
    requests: int


WINDOWS = {"azure": CapWindow("azure_llm_2023_code.csv", 1800.0, 120),
           "mooncake": CapWindow("mooncake_fast25_synthetic_trace.jsonl", 300.0, 40)}


def window_requests(window: CapWindow, profile: GpuProfile, cpu: bool) -> tuple:
    return select(trace_requests(window.trace, profile, cpu), start_s=window.start_s,
                  max_requests=20 if cpu else window.requests)


def rate_rps(requests) -> float:
    """The window's arrival rate at x1 (a capacity scale times this is req/s)."""
    return (len(requests) - 1) / max(requests[-1].arrival_s - requests[0].arrival_s, 1e-9)


def slo_for(cpu: bool) -> SloConfig:
    """The tuner's default SLO; on --cpu the quick start's (the tiny model meets 2 s at any rate)."""
    return SloConfig(ttft_s=0.3, tpot_s=0.02) if cpu else SloConfig()


def real_plan(start: float, slo: SloConfig) -> MeasurePlan:
    return MeasurePlan(ObjectiveName.capacity, slo, repeats=3, start_scale=start, first_step=1.15, tol=0.05,
                       warmup_requests=32)


# ---- the simulator (CPU work) -------------------------------------------------------------------------------
def sim_capacity(config: EngineConfig, profile: GpuProfile, requests, slo: SloConfig) -> Measurement:
    clock = VirtualClock()
    engine = sim_engine(config, profile, clock)
    plan = MeasurePlan(ObjectiveName.capacity, slo, repeats=1, tol=0.02)
    replayer = WindowReplayer(engine_replay(engine, clock), requests, plan, _quiet, lambda: 0.0)
    return measure(replayer, plan, replayer.span_s)[0]


def sim_point(config: EngineConfig, profile: GpuProfile, requests, scale: float) -> dict[str, float]:
    """The simulated window at one rate scale, whole (no SLO stop): its latencies and throughput."""
    return run_sim(config, profile, rebase(requests, scale))[0]


def sim_passes(config: EngineConfig, profile: GpuProfile, requests, slo: SloConfig, scale: float) -> bool:
    """Whether the simulated window, whole at `scale`, meets the SLO's attainment (a probe's verdict)."""
    clock = VirtualClock()
    result = replay(sim_engine(config, profile, clock), clock, rebase(requests, scale))
    return summarize(result, slo, 0.0)["slo_attainment"] >= slo.attainment


def first_failure(config: EngineConfig, profile: GpuProfile, requests, slo: SloConfig, top: float) -> float:
    """The simulated capacity from below: scales from `top` / 2 up in 1% steps, the last one before the first
    that fails (0.0 when `top` / 2 fails). Where passing is not monotone in the rate (one short request of a
    small window meets its TPOT bound at some rates and not at others), a bisection finds whichever edge its
    path leads to; this finds the lowest."""
    scale, last = top / 2, 0.0
    while scale <= top * 1.2 and sim_passes(config, profile, requests, slo, scale):
        last, scale = scale, scale * 1.01
    return last


# ---- the real runs (a GPU, or --cpu) ------------------------------------------------------------------------
def measure_real(profile: GpuProfile, windows: dict[str, CapWindow], chosen: dict[str, dict], cpu: bool,
                 budget_s: float, save: Path | None, starts: dict[str, float] | None = None) -> dict[str, Any]:
    """Per window and config: the simulated capacity, the real search from there (or from `starts[cfg]`), the
    replays at the real capacity; written to `save` after every replay. No config but the first is started
    past `budget_s` (counted from the model's load)."""
    import torch

    model, slo = load_real_model(profile, cpu), slo_for(cpu)
    began, started = time.perf_counter(), 0
    out: dict[str, Any] = {"created": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "windows": {}}
    for name, window in windows.items():
        requests = window_requests(window, profile, cpu)
        runs: dict[str, Any] = {}
        out["windows"][name] = {"window": window._asdict(), "requests": len(requests),
                                "rate_rps": rate_rps(requests), "configs": runs}
        print(f"{name}: {len(requests)} requests of {window.trace} from {window.start_s:g} s "
              f"({rate_rps(requests):.3f} req/s at x1)", flush=True)
        for cfg, knobs in chosen.items():
            if started and time.perf_counter() - began > budget_s:
                print(f"  {cfg}: not started (past --budget-s {budget_s:g})", flush=True)
                continue
            start, started = time.perf_counter(), started + 1
            config = engine_config(profile, knobs, cpu)
            sim = sim_capacity(config, profile, requests, slo)
            begin = (starts or {}).get(cfg, sim.values[0])
            cut: list[dict] = []  # the search's replays so far: what a call cut by its time limit keeps
            rows: list[list] = []  # and the steps they logged
            runs[cfg] = {"cut": cut, "rows": rows, "sim_capacity": sim.values[0], "start": begin}
            runs[cfg] = _real_search(config, model, requests, begin, slo, _recorder(cut, rows, save, out))
            runs[cfg].update(sim_capacity=sim.values[0], start=begin)
            upper = runs[cfg]["upper"]
            print(f"  {cfg}: sim x{sim.values[0]:.3f}, real x{runs[cfg]['capacity']:.3f} (fails at "
                  f"{'-' if upper is None else f'x{upper:.3f}'}), {time.perf_counter() - start:.0f} s", flush=True)
            _write(save, out)
            gc.collect()  # the KV pool goes before the next config's engine plans its own
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    return out


def _recorder(cut: list[dict], rows: list[list], save: Path | None,
              out: dict[str, Any]) -> Callable[[dict, list], None]:
    """Each replay into `cut` and the steps logged so far into `rows`, then the whole file rewritten."""

    def record(summary: dict, logged: list) -> None:
        cut.append(summary)
        rows[:] = [list(r) for r in logged]
        _write(save, out)

    return record


def _write(save: Path | None, out: dict[str, Any]) -> None:
    if save is not None:
        save.write_text(json.dumps(out) + "\n", encoding="utf-8")


def _real_search(config: EngineConfig, model, requests, start: float, slo: SloConfig,
                 on_replay: Callable[[dict, list], None]) -> dict[str, Any]:
    """The real search from `start`; `on_replay` gets each measured replay's scale, attainment and busy time,
    and the steps logged so far."""
    from runtime import LLMEngine, StepLog
    from tuner.trials.replay import ReplayClock

    clock = ReplayClock()
    engine = LLMEngine(config, clock=clock, model=model)
    log = StepLog(engine)  # every step after the warm-up, to check a refit on steps it never saw
    plan = real_plan(start, slo)
    replay_fn = engine_replay(engine, clock)
    replayer = WindowReplayer(replay_fn, requests, plan, _quiet, lambda: 0.0)
    replayer.warm_up(plan.warmup_requests)
    replay_fn(rebase(requests, start))  # unmeasured: every kernel shape of the window compiled
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
        point.append(summarize(replay_fn(rebase(requests, capacity)), slo, 0.0))
    probes = [{"scale": p.scale, "passed": p.passed, "attainment": [r.metrics["slo_attainment"] for r in p.replays],
               "busy_s": [r.metrics.get("busy_s", 0.0) for r in p.replays]} for p in measurement.probes]
    return {"capacity": capacity, "upper": upper if upper != float("inf") else None, "probes": probes,
            "point": [{k: m[k] for k in (*POINT, "slo_attainment", "busy_s")} for m in point],
            "rows": [list(r) for r in log.rows]}


def _quiet(*_: Any) -> None:
    pass


# ---- the comparison (CPU work) ------------------------------------------------------------------------------
def compare(profile: GpuProfile, real: dict[str, Any], chosen: dict[str, dict], cpu: bool) -> list[str]:
    lines: list[str] = []
    for name, data in real["windows"].items():
        window = CapWindow(**data["window"])
        requests = window_requests(window, profile, cpu)
        runs = {cfg: run for cfg, run in data["configs"].items() if cfg in chosen and "capacity" in run}
        cut = {cfg: run["cut"] for cfg, run in data["configs"].items() if cfg in chosen and "capacity" not in run}
        sims = {cfg: sim_figures(engine_config(profile, chosen[cfg], cpu), profile, requests, slo_for(cpu),
                                 runs.get(cfg)) for cfg in [*runs, *cut]}
        lines += [f"### {name}: {len(requests)} requests of {window.trace} from {window.start_s:g} s "
                  f"({rate_rps(requests):.3f} req/s at x1)", "",
                  *_capacity_table(runs, sims, rate_rps(requests)), "",
                  *(_cut_line(cfg, replays, sims[cfg].capacity) for cfg, replays in cut.items()),
                  *([""] if cut else []),
                  f"ranking by capacity, real: {_rank({k: real_capacity(v) for k, v in runs.items()})}",
                  f"ranking by capacity, sim:  {_rank({k: sims[k].capacity for k in runs})}", "",
                  f"At the real capacity: real median (min..max of {SPREAD_REPLAYS} whole replays) / simulated (error)",
                  "", "| config | scale | " + " | ".join(POINT) + " |", "|" + "---|" * (2 + len(POINT)),
                  *(_point_row(cfg, run, engine_config(profile, chosen[cfg], cpu), profile, requests)
                    for cfg, run in runs.items() if run["point"]), ""]
        rows = [r for run in data["configs"].values() for r in run.get("rows", [])]
        if rows:
            lines += [f"The real steps logged ({len(rows)}, after each warm-up) against the profile's prediction:", "",
                      *step_kinds(profile, rows), ""]
    return lines


def real_capacity(run: dict[str, Any]) -> float:
    """The mean over a config's finished real searches (this one and its `earlier` repeats)."""
    return float(np.mean([run["capacity"], *(e["capacity"] for e in run.get("earlier", []))]))


class SimFigures(NamedTuple):
    """One config's simulated capacity, with every step SENSITIVITY times as long, from below, and the
    simulator's verdict at each scale the real searches probed."""

    capacity: float
    band: tuple[float, ...]
    from_below: float  # first_failure
    verdicts: tuple[tuple[float, bool, bool], ...]  # (scale, real verdict, simulated verdict) per real probe


def sim_figures(config: EngineConfig, profile: GpuProfile, requests, slo: SloConfig,
                run: dict[str, Any] | None) -> SimFigures:
    capacity = sim_capacity(config, profile, requests, slo).values[0]
    band = tuple(sim_capacity(config, profile.scaled(f), requests, slo).values[0] for f in SENSITIVITY)
    if run is None:  # a cut search: no real verdicts to set beside
        return SimFigures(capacity, band, float("nan"), ())
    probes = [p for search in (run, *run.get("earlier", [])) for p in search["probes"]]
    verdicts = tuple((p["scale"], p["passed"], sim_passes(config, profile, requests, slo, p["scale"]))
                     for p in probes)
    return SimFigures(capacity, band, first_failure(config, profile, requests, slo, capacity), verdicts)


def _capacity_table(runs: dict[str, Any], sims: dict[str, SimFigures], rate: float) -> list[str]:
    extra = "simulated, step times " + " / ".join(f"x{f:g}" for f in SENSITIVITY) + " (error)"
    lines = ["| config | real capacity req/s (each search) | simulated req/s | sim error | " + extra
             + " | simulated from below (error) | real probes the simulator agrees with "
             "| real probes (scale: attainment of each replay) |", "|---|---|---|---|---|---|---|---|"]
    for cfg, run in runs.items():
        sim, real_cap = sims[cfg], real_capacity(run)
        searches = [run, *run.get("earlier", [])]
        spread = ("; ".join(f"x{s['capacity']:.3f}" + ("" if s["upper"] is None else f" (fails x{s['upper']:.3f})")
                            for s in searches))
        detail = " / ".join(f"x{b:.3f} ({_err(b, real_cap)})" for b in sim.band)
        lines.append(f"| {cfg} | {real_cap * rate:.3f} ({spread}) | {sim.capacity * rate:.3f} (x{sim.capacity:.3f}) "
                     f"| {_err(sim.capacity, real_cap)} | {detail} "
                     f"| x{sim.from_below:.3f} ({_err(sim.from_below, real_cap)}) | {_agreement(sim.verdicts)} "
                     f"| {_probes(run['probes'])} |")
    return lines


def _agreement(verdicts: tuple[tuple[float, bool, bool], ...]) -> str:
    """`5 of 6 (not x0.595: real fail, sim pass)`."""
    wrong = [f"x{scale:.3f}: real {'pass' if real else 'fail'}, sim {'pass' if sim else 'fail'}"
             for scale, real, sim in verdicts if real != sim]
    return f"{len(verdicts) - len(wrong)} of {len(verdicts)}" + (f" (not {'; '.join(wrong)})" if wrong else "")


def _point_row(cfg: str, run: dict[str, Any], config: EngineConfig, profile: GpuProfile, requests) -> str:
    sim = sim_point(config, profile, requests, run["capacity"])
    return f"| {cfg} | x{run['capacity']:.3f} | " + " | ".join(_point_cell(run["point"], sim, m) for m in POINT) + " |"


def _cut_line(cfg: str, replays: list[dict], sim: float) -> str:
    """A config whose real search the call's time limit cut: its replays, and the simulated capacity."""
    return (f"{cfg}: cut by the call's time limit after {len(replays)} replays ("
            + "; ".join(f"x{r['scale']:.3f}: {r['attainment']:.2f}" for r in replays) + f"); simulated x{sim:.3f}")


def step_kinds(profile: GpuProfile, rows: list[list]) -> list[str]:
    """Predicted / measured step time by kind of step: median, p10, p90, and the sums."""
    groups: dict[str, list[tuple[float, float]]] = {}
    model = profile.step_model
    for s in step_samples(rows):
        groups.setdefault(_kind(s.shape, s.variant.graphs), []).append((model.predict(s.variant, s.shape), s.seconds))
    for parts, seconds in tier_steps(rows):
        kind = "decode" if not any(shape.prefill_tokens for _, shape in parts) else "with prefill"
        groups.setdefault(f"over {len(parts)} tiers, {kind}", []).append((model.predict_tiers(parts), seconds))
    lines = ["| kind of step | steps | predicted / measured: median (p10..p90) | sum predicted / measured s |",
             "|---|---|---|---|"]
    for kind, pairs in sorted(groups.items()):
        ratio = np.array([p / t for p, t in pairs])
        predicted, measured = sum(p for p, _ in pairs), sum(t for _, t in pairs)
        lines.append(f"| {kind} | {len(pairs)} | {np.median(ratio):.2f} ({np.quantile(ratio, 0.1):.2f}.."
                     f"{np.quantile(ratio, 0.9):.2f}) | {predicted:.1f} / {measured:.1f} |")
    return lines


def _kind(shape, graphs: bool) -> str:
    if not shape.prefill_tokens:
        mean_ctx = shape.decode_context / max(shape.decode_seqs, 1)
        return f"decode, {'graph' if graphs else 'eager'}, mean context {'< 2k' if mean_ctx < 2048 else '>= 2k'}"
    size = "< 64" if shape.prefill_tokens < 64 else "< 1k" if shape.prefill_tokens < 1024 else (
        "< 4k" if shape.prefill_tokens < 4096 else ">= 4k")
    return f"{'mixed' if shape.decode_seqs else 'prefill'}, chunk tokens {size}"


def _probes(probes: list[dict]) -> str:
    return "; ".join(f"x{p['scale']:.3f}: {'/'.join(f'{a:.2f}' for a in p['attainment'])}"
                     f" {'pass' if p['passed'] else 'fail'}" for p in probes)


def _point_cell(real: list[dict], sim: dict[str, float], metric: str) -> str:
    values = [m[metric] for m in real]
    med = statistics.median(values)
    return f"{med:.4g} ({min(values):.4g}..{max(values):.4g}) / {sim[metric]:.4g} ({_err(sim[metric], med)})"


def _rank(values: dict[str, float]) -> str:
    return " > ".join(sorted(values, key=lambda k: -values[k]))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu", action="store_true", help="tiny model on CPU, small grid profile made on the spot")
    p.add_argument("--profile", default=None, help="a GPU profile from python -m runtime.profile")
    p.add_argument("--windows", default="azure", help="comma-separated: azure,mooncake")
    p.add_argument("--only", default=None, help="comma-separated config names, in this order")
    p.add_argument("--budget-s", type=float, default=480.0,
                   help="start no config but the first after this many seconds")
    p.add_argument("--start", default=None, metavar="CFG=SCALE,...",
                   help="start these configs' real searches here, not at the simulated capacity")
    p.add_argument("--real-in", nargs="+", default=None,
                   help="compare against these real measurements (one or more files; no model needed)")
    p.add_argument("--real-out", default=None, help="write the real measurements here (JSON)")
    p.add_argument("--out-md", default=None, help="also write the comparison (markdown) here")
    p.add_argument("--scan", action="store_true",
                   help="with --sim-only: the simulated verdict at every 0.5%% step from 0.8x to 1.1x the capacity")
    p.add_argument("--sim-only", action="store_true", help="only the simulated capacities (CPU), no real runs")
    add_record_args(p)
    a = p.parse_args()
    profile_path = a.profile or _cpu_profile(a.cpu)
    profile = load_profile(profile_path)
    every = configs(a.cpu)
    names = a.only.split(",") if a.only else list(ORDER)
    chosen = {k: every[k] for k in names}
    windows = {k: WINDOWS[k] for k in a.windows.split(",")}
    if a.sim_only:
        return _sim_only(profile, windows, chosen, a.cpu, a.scan)
    starts = parse_starts(a.start, chosen)
    real = real_runs(a, lambda save: measure_real(profile, windows, chosen, a.cpu, a.budget_s, save, starts))
    print(f"profile {profile.label} ({profile_path})", flush=True)
    lines = compare(profile, real, chosen, a.cpu)
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


def _sim_only(profile: GpuProfile, windows: dict[str, CapWindow], chosen: dict[str, dict], cpu: bool,
              scan: bool) -> int:
    """The simulated capacities and what the real search would replay (simulated busy seconds)."""
    for name, window in windows.items():
        requests = window_requests(window, profile, cpu)
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
