"""A trial's measurement, as an instrument takes it: probes repeated where they decide, a capacity
bracketed then bisected, medians kept with their spread. Pure: it calls `replay(scale)` for each
measured replay, so a real engine, a simulator or a test double with a known capacity plug in alike.

A probe replays the whole window at one rate scale. Its verdict is the majority of up to
`plan.repeats` replays (it stops as soon as the majority is reached); a first replay that is
decisive (see `metrics.summarize`) decides alone. A failing replay stops once it cannot change what its
probe decides (`metrics.stop_after_misses`): with one replay a probe, at the first miss past what the
attainment target allows.

Capacity (the default objective): the highest rate scale whose probe passes, with no fail below it.

    scale   0 ... lower --------- upper ...           bracket: from start_scale, x first_step, then
            pass   pass |  bisect  | fail   fail          squared each step (down: to x2 at most), until one
                                                          passes and one fails
                        `--- <= 1 + tol ---'            bisect (geometric mean) to the tolerance
         check check                                    then probes one and two tolerances below the edge

Pass/fail need not be monotone in the rate (how requests batch changes with it): a check that fails is a
fail below a pass, and the edge is settled again below that fail (bracket, bisect, check; at most
SETTLE_ROUNDS times). Every pass above a fail is reported (`inversions`), never hidden by the path.

Probes side by side (`Fan`, width w > 1: a simulator on w cores): the checkpoint probe runs beside the
bracket's first step up (a trial the checkpoint stops drops it), a bracket tries its next w steps at once, a
bisection cuts the bracket at w points at once (into w + 1 parts, geometrically), and the edge checks run
together. Each batch is read as the one-at-a-time path would read its probes: the lowest fail is the upper
end, the highest pass below it the lower end; a pass above that fail is reported (`inversions`).

With `plan.checkpoint` the first probe (at the incumbent's capacity) is reported to `checkpoint`,
which may stop the trial there: it is the only early stop, and it comes after a whole probe.
A capacity is a rate sustained for `plan.min_window_s` (replay.min_window_s): no probe replays the window
faster than it spans that long (`highest_scale`; at most MAX_SCALE). A config that meets the SLO there is
marked saturated: its capacity is a lower bound, the most the window can show.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from typing import NamedTuple

from tuner.config import ObjectiveName
from tuner.measure.job import Measurement, MeasurePlan, Probe, ReplaySummary

__all__ = ["MAX_SCALE", "MIN_SCALE", "MIN_SPAN_S", "ONE_AT_A_TIME", "Checkpoint", "Fan", "Progress", "Replayer",
           "highest_scale", "inversions", "measure", "probe"]

Replayer = Callable[[float], ReplaySummary]  # one measured replay of the window at a rate scale
Checkpoint = Callable[[Probe], bool]  # the first capacity probe -> keep going?
Progress = Callable[[int, float, int, int], None]  # (probe number, rate scale, requests done, requests)
Run = Callable[[Sequence[float]], list[Probe]]  # probes at these rate scales, in order


class Fan(NamedTuple):
    """How many probes a measurement runs at once, and how: `map(task, count)` gives [task(0), ...,
    task(count - 1)] (`executors.parallel.parallel_map` over `width` processes, task 0 in this one). Task 0
    probes through the measurement's replayer, the others through `replay`, quiet (no progress bar: several
    would draw over each other)."""

    width: int
    map: Callable[[Callable[[int], Probe], int], list[Probe]]
    replay: Replayer | None = None


ONE_AT_A_TIME = Fan(1, lambda task, count: [task(i) for i in range(count)])

MAX_SCALE = 1e4  # x the window's rate: beyond this the window is one burst
MIN_SCALE = 1e-3  # below this the SLO is not met by a lone request: capacity 0
MIN_SPAN_S = 1e-3  # a window scaled shorter than this arrives at once: higher scales are the same replay
# downwards a bracket's steps square up to this factor, then keep it: a passing replay takes the window's span over
# the rate, so a pass far below the capacity is the slowest probe there is (at 1/15 of it, 15 times as long), and
# a squared step (x4, x16, ...) lands that far below
MAX_DOWN_STEP = 2.0
SETTLE_ROUNDS = 3  # an edge with a fail below it is moved below that fail and checked again, at most this often
HEADLINE = ("goodput_rps", "slo_attainment", "throughput_rps", "output_tok_s", "ttft_p50_s", "ttft_p99_s",
            "tpot_p50_s", "tpot_p99_s", "e2e_p99_s", "itl_p99_s", "kv_util_mean", "kv_util_peak",
            "kv_waste_mean", "prefix_hit_rate", "preemptions", "rejections", "peak_memory_gb", "slo_load")


def probe(replay: Replayer, scale: float, repeats: int) -> Probe:
    """Replays at `scale` until the majority of `repeats` agrees, or a decisive first replay."""
    replays: list[ReplaySummary] = []
    majority = repeats // 2 + 1
    while len(replays) < repeats:
        replays.append(replay(scale))
        if len(replays) == 1 and replays[0].decisive:
            break
        passes = sum(r.passed for r in replays)
        if passes >= majority or len(replays) - passes >= majority:
            break
    passes = sum(r.passed for r in replays)
    return Probe(scale, tuple(replays), passes > len(replays) - passes)


def measure(replay: Replayer, plan: MeasurePlan, span_s: float, checkpoint: Checkpoint | None = None,
            fan: Fan = ONE_AT_A_TIME) -> tuple[Measurement, Probe | None]:
    """The trial's measurement, and the checkpoint probe when the checkpoint stopped it (else None)."""
    if plan.objective is ObjectiveName.capacity:
        return _capacity(replay, plan, span_s, checkpoint, fan)
    fixed = [replay(1.0) for _ in range(plan.repeats)]  # at the given rate: every repeat, medians
    point = Probe(1.0, tuple(fixed), statistics.median(r.metrics["slo_attainment"] for r in fixed)
                  >= plan.slo.attainment)
    if plan.objective is ObjectiveName.pareto:
        values = (point.median("output_tok_s"), point.median("e2e_p99_s"))
    else:
        values = (point.median("goodput_rps"),)
    return Measurement(values, (_lean(point),), _headline(point, (point,)), point.replays[0].rows), None


def _capacity(replay: Replayer, plan: MeasurePlan, span_s: float, checkpoint: Checkpoint | None,
              fan: Fan) -> tuple[Measurement, Probe | None]:
    probes: list[Probe] = []

    def run(scales: Sequence[float]) -> list[Probe]:
        if len(scales) == 1 or fan.width <= 1:
            done = [probe(replay, s, plan.repeats) for s in scales]
        else:  # side by side: the first through `replay` (its progress shows), the others through the fan's own
            side = fan.replay or replay
            done = fan.map(lambda i: probe(replay if i == 0 else side, scales[i], plan.repeats), len(scales))
        probes.extend(done)
        return done

    width = max(1, fan.width)
    max_scale = highest_scale(span_s, plan.min_window_s)
    start = min(plan.start_scale, max_scale)
    ahead = width > 1 and plan.checkpoint and checkpoint is not None and start < max_scale
    first, *up = run([start, min(start * plan.first_step, max_scale)] if ahead else [start])
    if plan.checkpoint and checkpoint is not None and not checkpoint(first):
        del probes[1:]  # the bracket's first step, run beside the checkpoint, is not part of a stopped trial
        return _result(probes, None, first.scale, saturated=False), first
    if up and first.passed:  # the bracket's first step is made: on from there
        lower, upper = _ends(up, first, None)
        lower, upper = (lower, upper) if upper else _bracket(run, lower, plan.first_step ** 2, max_scale, width)
    else:
        lower, upper = _bracket(run, first, plan.first_step, max_scale, width)
    lower, upper = _bisect(run, lower, upper, plan.tol, width)
    for _ in range(SETTLE_ROUNDS):  # a fail below the edge: the edge moves below it, and is checked again
        if lower is None or upper is None or _checked(run, lower, plan, width):
            break
        fail = max((p for p in probes if not p.passed and p.scale < lower.scale), key=lambda p: p.scale)
        below = max((p for p in probes if p.passed and p.scale < fail.scale), key=lambda p: p.scale, default=None)
        if below is None:
            below, fail = _bracket(run, fail, 1.0 + 4 * plan.tol, max_scale, width)
        lower, upper = _bisect(run, below, fail, plan.tol, width)
    saturated = upper is None and lower is not None
    return _result(probes, lower, upper.scale if upper else None, saturated=saturated), None


def highest_scale(span_s: float, min_window_s: float) -> float:
    """The fastest a window may be replayed and still span `min_window_s` (a capacity, not a burst's drain)."""
    return min(MAX_SCALE, span_s / max(min_window_s, MIN_SPAN_S)) if span_s > 0 else MAX_SCALE


def _bracket(run: Run, first: Probe, step: float, max_scale: float,
             width: int = 1) -> tuple[Probe | None, Probe | None]:
    """From `first`, steps that square each time (downwards, up to MAX_DOWN_STEP), until one probe passes and one
    fails (or a bound is hit); `width` steps at a time."""
    lower, upper = (first, None) if first.passed else (None, first)
    while upper is None and lower.scale < max_scale:  # bracket upwards
        scales, scale = [], lower.scale
        while len(scales) < width and scale < max_scale:
            scale = min(scale * step, max_scale)
            scales.append(scale)
            step *= step
        lower, upper = _ends(run(scales), lower, None)
    while lower is None and upper.scale > MIN_SCALE:  # bracket downwards
        scales, scale = [], upper.scale
        while len(scales) < width and scale > MIN_SCALE:
            scale = max(scale / step, MIN_SCALE)
            scales.append(scale)
            step = max(step, min(step * step, MAX_DOWN_STEP))
        lower, upper = _ends(run(scales), None, upper)
    return lower, upper


def _bisect(run: Run, lower: Probe | None, upper: Probe | None, tol: float,
            width: int = 1) -> tuple[Probe | None, Probe | None]:
    """Cut the bracket (geometrically) until upper / lower <= 1 + tol: in halves, or at `width` points at once
    (never more than the tolerance needs)."""
    while lower is not None and upper is not None and upper.scale / lower.scale > 1 + tol:
        ratio = upper.scale / lower.scale
        parts = min(width + 1, max(2, math.ceil(math.log(ratio) / math.log(1 + tol))))
        cuts = [math.sqrt(lower.scale * upper.scale)] if parts == 2 else [
            lower.scale * ratio ** (k / parts) for k in range(1, parts)]
        lower, upper = _ends(run(cuts), lower, upper)
    return lower, upper


def _ends(batch: list[Probe], lower: Probe | None, upper: Probe | None) -> tuple[Probe | None, Probe | None]:
    """The bracket after a batch of probes, read as one at a time would read them in rate order: the lowest
    fail is the upper end, the highest pass below it the lower end."""
    for p in sorted(batch, key=lambda p: p.scale):
        if upper is not None and p.scale >= upper.scale:
            break
        if p.passed:
            lower = p
        else:
            upper = p
            break
    return lower, upper


def _checked(run: Run, lower: Probe, plan: MeasurePlan, width: int = 1) -> bool:
    """Probes one and two tolerances below the edge: pass/fail need not be monotone in the rate (batching
    changes with it), and an edge with a fail below it is the path's luck, not a capacity. One at a time, the
    first fail ends them; side by side, they run `width` at once."""
    scales = [lower.scale / (1 + plan.tol) ** k for k in range(1, plan.edge_checks + 1)]
    return all(all(p.passed for p in run(scales[k:k + width])) for k in range(0, len(scales), width))


def inversions(probes: Sequence[Probe]) -> list[tuple[Probe, Probe]]:
    """(pass, fail) pairs with the pass at a higher rate than the fail, highest pass first."""
    fails = [p for p in probes if not p.passed]
    return sorted(((p, f) for p in probes if p.passed for f in fails if p.scale > f.scale),
                  key=lambda pair: (-pair[0].scale, -pair[1].scale))


def _result(probes: list[Probe], lower: Probe | None, upper_scale: float | None, saturated: bool) -> Measurement:
    point = lower if lower is not None else probes[-1]
    metrics = _headline(point, probes)
    metrics["capacity_upper_scale"] = upper_scale if upper_scale is not None else math.inf
    found = inversions(probes)
    if found:  # the highest pass above a fail, and the highest fail below it
        metrics |= {"inversion_pass_scale": found[0][0].scale, "inversion_fail_scale": found[0][1].scale,
                    "inversions": float(len(found))}
    scale = lower.scale if lower is not None else 0.0
    return Measurement((scale,), tuple(map(_lean, probes)), metrics, point.replays[0].rows, saturated)


def _headline(point: Probe, probes: list[Probe] | tuple[Probe, ...]) -> dict[str, float]:
    """Medians over the deciding probe's replays, its attainment spread, and what the measurement cost."""
    metrics = {name: point.median(name) for name in HEADLINE if name in point.replays[0].metrics}
    attainment = [r.metrics["slo_attainment"] for r in point.replays]
    metrics |= {"slo_attainment_min": min(attainment), "slo_attainment_max": max(attainment),
                "probes": float(len(probes)), "replays": float(sum(len(p.replays) for p in probes)),
                "replay_busy_s": sum(r.metrics.get("busy_s", 0.0) for p in probes for r in p.replays)}
    return metrics


def _lean(p: Probe) -> Probe:
    """The probe without per-request rows: the measurement keeps one replay's rows, not every one's."""
    return p._replace(replays=tuple(r._replace(rows=()) for r in p.replays))
