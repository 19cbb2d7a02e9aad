"""The capacity experiment's comparison (`sim_capacity.py`, CPU work): per window, each config's real
capacity (the mean of its finished searches) against the simulated one, from below, with the real probes'
verdicts set beside the simulator's; the latencies at the real capacity; the real steps by kind.
"""

from __future__ import annotations

import statistics
from typing import Any, NamedTuple

import numpy as np

from experiments.capacity_sim import (
    CPU_REQUESTS,
    POINT,
    SENSITIVITY,
    SPREAD_REPLAYS,
    first_failure,
    sim_capacity,
    sim_passes,
    sim_point,
    slo_for,
)
from experiments.sim_lab import compare, engine_config, ranking, relative_error
from experiments.windows import Window, rate_rps
from runtime import EngineConfig, GpuProfile
from runtime.sim.refit import step_samples, tier_steps
from tuner.config import SloConfig


def capacity_lines(profile: GpuProfile, real: dict[str, Any], chosen: dict[str, dict], cpu: bool) -> list[str]:
    """The comparison's lines: per window, the capacities, the latencies at the real one, the real steps."""

    def window_lines(name: str, data: dict[str, Any], window: Window, requests: tuple) -> list[str]:
        runs = {cfg: run for cfg, run in data["configs"].items() if cfg in chosen and "capacity" in run}
        cut = {cfg: run["cut"] for cfg, run in data["configs"].items() if cfg in chosen and "capacity" not in run}
        sims = {cfg: sim_figures(engine_config(profile, chosen[cfg], cpu), profile, requests, slo_for(cpu),
                                 data["configs"][cfg]) for cfg in [*runs, *cut]}
        reals = {cfg: real_capacity(run) for cfg, run in runs.items()}
        lines = [*_capacity_table(runs, sims, rate_rps(requests)), "",
                 *(_cut_line(cfg, replays, sims[cfg]) for cfg, replays in cut.items()),
                 *([""] if cut else []),
                 f"ranking by capacity, real: {ranking(reals, highest_first=True)}",
                 f"ranking by capacity, sim:  {ranking({k: sims[k].capacity for k in runs}, highest_first=True)}", "",
                 f"At the real capacity: real median (min..max of {SPREAD_REPLAYS} whole replays) / simulated (error)",
                 "", "| config | scale | " + " | ".join(POINT) + " |", "|" + "---|" * (2 + len(POINT)),
                 *(_point_row(cfg, run, engine_config(profile, chosen[cfg], cpu), profile, requests)
                   for cfg, run in runs.items() if run["point"]), ""]
        rows = [r for run in data["configs"].values() for r in run.get("rows", [])]
        if rows:
            lines += [f"The real steps logged ({len(rows)}, after each warm-up) against the profile's prediction:", "",
                      *step_kinds(profile, rows), "", "The same one-tier steps by decode sequences in the step:", "",
                      *_ratio_table(_by_batch(profile, rows)), ""]
        return lines

    return compare(profile, real, cpu, CPU_REQUESTS, window_lines)


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


MAJORITY = 2  # of the 3 replays a real probe takes at most (sim_capacity.real_plan)


def sim_figures(config: EngineConfig, profile: GpuProfile, requests, slo: SloConfig,
                run: dict[str, Any]) -> SimFigures:
    capacity = sim_capacity(config, profile, requests, slo).values[0]
    band = tuple(sim_capacity(config, profile.scaled(f), requests, slo).values[0] for f in SENSITIVITY)
    if "capacity" not in run:  # a cut search: its decided probes from the replays it kept
        verdicts = tuple((scale, passed, sim_passes(config, profile, requests, slo, scale))
                         for scale, passed in cut_verdicts(run["cut"], slo).items())
        return SimFigures(capacity, band, float("nan"), verdicts)
    probes = [p for search in (run, *run.get("earlier", [])) for p in search["probes"]]
    verdicts = tuple((p["scale"], p["passed"], sim_passes(config, profile, requests, slo, p["scale"]))
                     for p in probes)
    return SimFigures(capacity, band, first_failure(config, profile, requests, slo, capacity), verdicts)


def cut_verdicts(replays: list[dict], slo: SloConfig) -> dict[float, bool]:
    """Scale -> the verdict of a cut search's replays there (of one or more calls; scales equal to 3 decimals are
    one), where it is decided as a real probe decides: `MAJORITY` replays of one verdict, and more of it."""
    by_scale: dict[float, list[bool]] = {}
    for r in replays:
        by_scale.setdefault(round(r["scale"], 3), []).append(r["attainment"] >= slo.attainment)
    return {scale: 2 * sum(ok) > len(ok) for scale, ok in sorted(by_scale.items())
            if max(sum(ok), len(ok) - sum(ok)) >= MAJORITY and 2 * sum(ok) != len(ok)}


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
        detail = " / ".join(f"x{b:.3f} ({relative_error(b, real_cap)})" for b in sim.band)
        lines.append(f"| {cfg} | {real_cap * rate:.3f} ({spread}) | {sim.capacity * rate:.3f} (x{sim.capacity:.3f}) "
                     f"| {_error(sim.capacity, run)} | {detail} "
                     f"| x{sim.from_below:.3f} ({relative_error(sim.from_below, real_cap)}) "
                     f"| {_agreement(sim.verdicts)} "
                     f"| {_probes(run['probes'])} |")
    return lines


def _error(sim: float, run: dict[str, Any]) -> str:
    """The simulated capacity's error against the real one; for a `--check` run, whose real capacity is only known
    to lie between its last pass and its first fail, the range of errors that bracket allows."""
    if "check" not in run or run["upper"] is None:
        return relative_error(sim, real_capacity(run))
    return f"{relative_error(sim, run['upper'])}..{relative_error(sim, run['capacity'])} (check)"


def _agreement(verdicts: tuple[tuple[float, bool, bool], ...]) -> str:
    """`5 of 6 (not x0.595: real fail, sim pass)`."""
    wrong = [f"x{scale:.3f}: real {'pass' if real else 'fail'}, sim {'pass' if sim else 'fail'}"
             for scale, real, sim in verdicts if real != sim]
    return f"{len(verdicts) - len(wrong)} of {len(verdicts)}" + (f" (not {'; '.join(wrong)})" if wrong else "")


def _point_row(cfg: str, run: dict[str, Any], config: EngineConfig, profile: GpuProfile, requests) -> str:
    sim = sim_point(config, profile, requests, run["capacity"])
    return f"| {cfg} | x{run['capacity']:.3f} | " + " | ".join(_point_cell(run["point"], sim, m) for m in POINT) + " |"


def _cut_line(cfg: str, replays: list[dict], sim: SimFigures) -> str:
    """A config whose real search the call's time limit cut: its replays, the simulated capacity, and the
    simulator's verdicts at the scales the replays decided."""
    return (f"{cfg}: cut by the call's time limit after {len(replays)} replays ("
            + "; ".join(f"x{r['scale']:.3f}: {r['attainment']:.2f}" for r in replays) + f"); simulated "
            f"x{sim.capacity:.3f}; decided real probes the simulator agrees with: {_agreement(sim.verdicts)}")


def step_kinds(profile: GpuProfile, rows: list[list]) -> list[str]:
    """Predicted / measured step time by kind of step: median, p10, p90, and the sums."""
    groups: dict[str, list[tuple[float, float]]] = {}
    model = profile.step_model
    for s in step_samples(rows):
        groups.setdefault(_kind(s.shape, s.variant.mode), []).append((model.predict(s.variant, s.shape), s.seconds))
    for parts, seconds in tier_steps(rows):
        kind = "decode" if not any(shape.prefill_tokens for _, shape in parts) else "with prefill"
        groups.setdefault(f"over {len(parts)} tiers, {kind}", []).append((model.predict_tiers(parts), seconds))
    return _ratio_table(groups)


def _by_batch(profile: GpuProfile, rows: list[list]) -> dict[str, list[tuple[float, float]]]:
    """(predicted, measured) per one-tier step, by decode or with prefill and its decode sequences in 16s: the
    batch sizes a fit saw little of show here (a 40-request window never decodes more than 40)."""
    groups: dict[str, list[tuple[float, float]]] = {}
    model = profile.step_model  # built once: a profile makes a new model at each ask
    for s in step_samples(rows):
        low = min(s.shape.decode_seqs // 16 * 16, 48)
        seqs = f"{low}+" if low == 48 else f"{low}-{low + 15}"
        kind = f"{'with prefill' if s.shape.prefill_tokens else 'decode'}, {seqs} seqs"
        groups.setdefault(kind, []).append((model.predict(s.variant, s.shape), s.seconds))
    return groups


def _ratio_table(groups: dict[str, list[tuple[float, float]]]) -> list[str]:
    lines = ["| kind of step | steps | predicted / measured: median (p10..p90) | sum predicted / measured s |",
             "|---|---|---|---|"]
    for kind, pairs in sorted(groups.items()):
        ratio = np.array([p / t for p, t in pairs])
        predicted, measured = sum(p for p, _ in pairs), sum(t for _, t in pairs)
        lines.append(f"| {kind} | {len(pairs)} | {np.median(ratio):.2f} ({np.quantile(ratio, 0.1):.2f}.."
                     f"{np.quantile(ratio, 0.9):.2f}) | {predicted:.1f} / {measured:.1f} |")
    return lines


def _kind(shape, mode: str) -> str:
    if not shape.prefill_tokens:
        mean_ctx = shape.decode_context / max(shape.decode_seqs, 1)
        return f"decode, {mode}, mean context {'< 2k' if mean_ctx < 2048 else '>= 2k'}"
    size = "< 64" if shape.prefill_tokens < 64 else "< 1k" if shape.prefill_tokens < 1024 else (
        "< 4k" if shape.prefill_tokens < 4096 else ">= 4k")
    return f"{'mixed' if shape.decode_seqs else 'prefill'}, chunk tokens {size}"


def _probes(probes: list[dict]) -> str:
    return "; ".join(f"x{p['scale']:.3f}: {'/'.join(f'{a:.2f}' for a in p['attainment'])}"
                     f" {'pass' if p['passed'] else 'fail'}" for p in probes)


def _point_cell(real: list[dict], sim: dict[str, float], metric: str) -> str:
    values = [m[metric] for m in real]
    med = statistics.median(values)
    return f"{med:.4g} ({min(values):.4g}..{max(values):.4g}) / {sim[metric]:.4g} ({relative_error(sim[metric], med)})"
