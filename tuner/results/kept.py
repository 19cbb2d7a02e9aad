"""The conclusion's measurements, kept in the study as they are made: a signal or a crash loses only the one
that was running, and a rerun of the same command resumes the conclusion from those kept.

One study user attr per measurement, `pagetune.remeasured/<window>/<trial>/<round>`: its value, whether it
saturated, its probes (scale, verdict, each replay's attainment: what the capacity plot draws) and, for the
first measurement of a config, its per-request latencies. A failed measurement is not kept: a rerun tries
it again. What is not kept: a sim+real measurement's timed steps (a resumed conclusion refits the profile
from the steps it measured itself).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import optuna

from tuner.measure.job import Probe, ReplaySummary

__all__ = ["PREFIX", "Kept", "KeptMeasurements"]

PREFIX = "pagetune.remeasured/"


class Kept(NamedTuple):
    """One measurement of the conclusion, as `finalists.remeasure` uses it."""

    value: float
    probes: tuple[Probe, ...]
    saturated: bool
    rows: tuple[dict[str, Any], ...] = ()  # per-request latencies (the first measurement of a config only)
    latency: float | None = None  # pareto: its E2E p99 (s), the second objective


class KeptMeasurements:
    """Read and write the kept measurements of one study (None: keep nothing, e.g. a test without a study)."""

    def __init__(self, study: optuna.Study | None) -> None:
        self.study = study
        self._attrs = dict(study.user_attrs) if study is not None else {}

    @staticmethod
    def key(window: str, trial: int, round_: int) -> str:
        return f"{PREFIX}{window}/{trial}/{round_}"

    def get(self, window: str, trial: int, round_: int) -> Kept | None:
        record = self._attrs.get(self.key(window, trial, round_))
        if record is None:
            return None
        probes = tuple(Probe(scale, tuple(ReplaySummary(scale, passed, False, {"slo_attainment": a})
                                          for a in attainments), passed)
                       for scale, passed, attainments in record["probes"])
        return Kept(record["value"], probes, record["saturated"], tuple(record.get("rows", ())),
                    record.get("latency"))

    def put(self, window: str, trial: int, round_: int, kept: Kept) -> None:
        if self.study is None:
            return
        record = {"value": kept.value, "saturated": kept.saturated, "latency": kept.latency,
                  "probes": [[p.scale, p.passed, [r.metrics["slo_attainment"] for r in p.replays]]
                             for p in kept.probes]}
        if kept.rows:
            record["rows"] = list(kept.rows)
        self.study.set_user_attr(self.key(window, trial, round_), record)
        self._attrs[self.key(window, trial, round_)] = record

    def count(self) -> int:
        return sum(k.startswith(PREFIX) for k in self._attrs)

    def records(self) -> list[tuple[str, dict[str, Any]]]:
        """Every kept measurement as stored, `window/trial/round` with its record, in key order."""
        return [(k[len(PREFIX):], v) for k, v in sorted(self._attrs.items()) if k.startswith(PREFIX)]
