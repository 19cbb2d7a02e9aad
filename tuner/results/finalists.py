"""After the search: measure the best few candidates and the baseline again, pick, and prove the pick.

    select   the finalists (the best `tuner.finalists` distinct feasible configs) and the baseline, in
             `validation.rounds` interleaved rounds on the search window: fresh replays, one
             measurement of each config per round, the order rotated every round. The pick is the
             config with the best median; the trials' own search values never decide it.
    prove    the pick and the baseline in interleaved rounds on the held-out window (without one: fresh
             rounds on the search window), replays that took no part in selecting the pick.
The verdict (`tuner.results.verdict`) reads the proof rounds only.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import optuna
from optuna.trial import FrozenTrial, TrialState

from runtime import EngineConfig
from tuner.config import Measuring, ObjectiveName, TunerConfig
from tuner.executors.base import Executor
from tuner.executors.parallel import measurement_workers, parallel_map
from tuner.measure.job import Probe, TrialJob, TrialStatus
from tuner.measure.plan import dither, plan_for, top_start
from tuner.redact import mask_text
from tuner.results.kept import Kept, KeptMeasurements
from tuner.store.record import BASELINE_ATTR, feasible, is_baseline
from tuner.traffic import ReplayWindow

__all__ = ["BASELINE", "Candidate", "Remeasured", "choose", "measure_once", "remeasure"]

BASELINE = "baseline"
log = logging.getLogger("pagetune")


class Candidate(NamedTuple):
    label: str  # "baseline" or "trial N"
    trial: int  # its Optuna trial number
    config: EngineConfig
    search_value: float  # what the search measured (the objective's unit); a start, never a proof
    params: dict[str, Any]  # its knob values


class Remeasured(NamedTuple):
    window: str  # "search" | "validation"
    values: dict[str, list[float | None]]  # label -> one value per round (None: that measurement failed)
    probes: dict[str, list[tuple[Probe, ...]]]  # label -> per round, its probes (capacity: for the plot)
    rows: dict[str, tuple[dict[str, Any], ...]]  # label -> per-request latencies of its first measurement
    failed: list[str]  # what did not complete, with reasons
    saturated: dict[str, list[bool]]  # label -> per round: the SLO held at every rate the window allows
    steps: tuple[tuple[str, int, int, int, int, float], ...] = ()  # sim+real: the real engine's timed steps
    latency: dict[str, list[float | None]] | None = None  # pareto: label -> per round, its E2E p99 (s)

    def median(self, label: str) -> float | None:
        done = [v for v in self.values[label] if v is not None]
        return statistics.median(done) if done else None


def choose(study: optuna.Study, tuner: TunerConfig) -> tuple[Candidate | None, list[Candidate]]:
    """The baseline (None if its trial did not complete) and the best distinct feasible candidates."""
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    base = next((t for t in trials if is_baseline(t) and feasible(t)), None)
    ranked = sorted((t for t in trials if feasible(t) and not is_baseline(t)), key=lambda t: -t.values[0])
    if tuner.objective is ObjectiveName.pareto:
        front = {t.number for t in study.best_trials}
        ranked.sort(key=lambda t: t.number not in front)  # the front first, by throughput within it
    seen = {_key(base)} if base is not None else set()
    chosen: list[Candidate] = []
    for t in ranked:
        if _key(t) not in seen and len(chosen) < tuner.finalists:
            seen.add(_key(t))
            chosen.append(_candidate(t, f"trial {t.number}"))
    return (_candidate(base, BASELINE) if base is not None else None), chosen


def _key(t: FrozenTrial) -> str:
    return repr(sorted(t.user_attrs["runtime"].items()))


def _candidate(t: FrozenTrial, label: str) -> Candidate:
    params = {**t.user_attrs.get(BASELINE_ATTR, {}), **t.params}
    return Candidate(label, t.number, EngineConfig.from_mapping(t.user_attrs["runtime"]), t.values[0], params)


def remeasure(executor: Executor, measuring: Measuring, candidates: Sequence[Candidate], window: ReplayWindow,
              rounds: int, on_done: Callable[[], None] = lambda: None, kept: KeptMeasurements | None = None,
              independent: bool = False) -> Remeasured:
    """`rounds` interleaved rounds on `window`: one fresh measurement of every candidate per round. A measurement
    kept from an earlier run (`kept`) is not made again, and each new one is kept as it completes; a failed one is
    made again up to RETRIES times, each failure said at once with its reason. Measurements run side by side where
    the executor allows it (`executors.parallel`: simulated ones), with the same result. `independent`: capacity
    searches start below the window's fastest rate (`top_start`), not at the candidate's search value (another
    executor measured that: sim+real)."""
    kept = kept or KeptMeasurements(None)
    labels = [c.label for c in candidates]
    result = Remeasured(window.key, {k: [] for k in labels}, {k: [] for k in labels}, {}, [], {k: [] for k in labels},
                        latency={k: [] for k in labels})
    steps: list = []
    n = len(candidates)
    order = [(r, c) for r in range(rounds) for c in [*candidates[r % n:], *candidates[:r % n]]]  # rotated per round
    found = {i: kept.get(window.key, c.trial, r) for i, (r, c) in enumerate(order)}
    todo = [i for i, done in found.items() if done is None]
    for done in found.values():
        if done is not None:
            on_done()

    def measure(j: int) -> tuple[Kept | None, list[str], list]:  # may run in a forked process: its own lists
        r, c = order[todo[j]]
        failed: list[str] = []
        its_steps: list = []
        return _measure_retrying(executor, measuring, c, window, r, failed, its_steps, independent), failed, its_steps

    def arrived(j: int, out: tuple[Kept | None, list[str], list]) -> None:  # in this process, as each completes
        r, c = order[todo[j]]
        if out[0] is not None:
            kept.put(window.key, c.trial, r, out[0] if r == 0 else out[0]._replace(rows=()))
        on_done()

    interrupts = getattr(executor, "interrupts", None)
    fresh = parallel_map(measure, len(todo), measurement_workers(executor, len(todo)), arrived,
                         interrupts.check if interrupts is not None else lambda: None)
    for j, (done, failed, its_steps) in enumerate(fresh):
        found[todo[j]] = done
        result.failed.extend(failed)
        steps.extend(its_steps)
    for i, (_, c) in enumerate(order):
        done = found[i]
        if done is not None and done.rows:
            result.rows.setdefault(c.label, done.rows)
        result.values[c.label].append(None if done is None else done.value)
        result.latency[c.label].append(None if done is None else done.latency)
        result.probes[c.label].append(() if done is None else done.probes)
        result.saturated[c.label].append(False if done is None else done.saturated)
    return result._replace(steps=tuple(steps))


RETRIES = 2  # a failed re-measurement is made again at most this often before it counts as missing


def _measure_retrying(executor: Executor, measuring: Measuring, c: Candidate, window: ReplayWindow, round_: int,
                      failed: list[str], steps: list, independent: bool) -> Kept | None:
    for attempt in range(RETRIES + 1):
        done, reason = measure_once(executor, measuring, c, window, round_, steps, independent)
        if done is not None:
            return done
        where = f"{c.label} on the {window.key} window, round {round_ + 1}"
        again = attempt < RETRIES and not reason.startswith(TrialStatus.infeasible.value)
        log.warning("re-measurement failed: %s: %s%s", where, mask_text(reason),
                    f"; measuring it again ({attempt + 1} of {RETRIES})" if again else "")
        if not again:
            failed.append(f"{where}: {reason} ({attempt + 1} attempt{'s' if attempt else ''})")
            return None
    return None


def measure_once(executor: Executor, measuring: Measuring, c: Candidate, window: ReplayWindow, round_: int,
                 steps: list, independent: bool) -> tuple[Kept | None, str]:
    """One fresh measurement, or None and why not. Capacity starts its bracket at the candidate's search capacity
    (req/s), unless `independent` (that capacity was simulated): then just below the fastest rate the window can
    show, stepping down (`top_start`). Either start is dithered."""
    capacity = measuring.tuner.objective is ObjectiveName.capacity
    key = f"{c.label}/{window.key}/{round_}"
    start = None
    if capacity and independent:
        start = top_start(measuring, window.span_s, key)
    elif capacity and c.search_value > 0:
        start = c.search_value / window.rate_rps * dither(measuring, key)
    job = TrialJob(-1 - round_, c.config, None, window.key, plan_for(measuring, start, repeats=1, checkpoint=False),
                   step_log=measuring.tuner.fidelity == "sim+real")  # sim+real re-measures for real: refit the profile
    outcome = executor.run(job, window.requests, lambda *_: None, lambda _: True, measuring.tuner.trial_timeout_s)
    steps.extend(outcome.steps)
    if outcome.status is not TrialStatus.ok or outcome.measurement is None:
        return None, f"{outcome.status.value}: {outcome.reason or 'no reason given'}"
    m = outcome.measurement
    scale = window.rate_rps if capacity else 1.0
    probes = tuple(p._replace(scale=p.scale * scale) for p in m.probes) if capacity else m.probes
    latency = m.values[1] if len(m.values) > 1 else None
    return Kept(m.values[0] * scale, probes, m.saturated, m.latency_rows, latency), ""
