"""What the user sees while a study runs: progress bars, one line per trial, the closing summary.

Lines go to the `pagetune` logger: Hydra's job logging prints them (plain) and appends them, with
their time, to `pagetune.log` in the output folder. While the bars are up, every log record (MLflow's
and Optuna's too) is written above them instead of through them. Bars only on a terminal: where stderr
is a file or a pipe (nohup, a CI or Kubernetes log), a bar's redraws would fill the log, so the trials
say themselves in their lines (with a line for each replay of 30 s or more: a real probe's), and the conclusion's
progress is a line per measurement with its ETA.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time

import optuna
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from tuner.measure.job import TrialOutcome, TrialStatus
from tuner.redact import mask_text
from tuner.results.kept import KeptMeasurements
from tuner.rounding import rounded
from tuner.search.study import TrialFailed
from tuner.store.record import INTERRUPTED, is_baseline

__all__ = ["SATURATED_WARNING", "Console", "interrupted_line", "inversion_note", "quiet_failed_trial_tracebacks",
           "trial_line"]

SATURATED_WARNING = ("warning: the baseline met the SLO at the fastest rate the search window allows (spanning "
                     "replay.min_window_s): capacity cannot rank configs on this window. Tighten the SLO (slo.ttft_s, "
                     "slo.tpot_s) or replay more requests (replay.max_requests, replay.duration_s).")


def trial_line(trial: optuna.trial.Trial, outcome: TrialOutcome, metrics: dict[str, float]) -> str:
    knobs = ", ".join(f"{k}={rounded(v)}" for k, v in trial.params.items())
    head = f"trial {trial.number}{' (baseline)' if is_baseline(trial) else ''}"
    if outcome.status is TrialStatus.ok and "capacity_rps" in metrics:
        cost = f"{metrics['probes']:.0f} probes, {metrics['replays']:.0f} replays"
        bound = " (the SLO held at every rate the window allows)" if metrics.get("saturated") else ""
        return (f"{head}: capacity {metrics['capacity_rps']:.4g} req/s = x{metrics['capacity_x_trace']:.3g} the "
                f"trace's rate{bound}; TTFT p99 {metrics['ttft_p99_s']:.3g} s, TPOT p99 {metrics['tpot_p99_s']:.3g} s "
                f"there ({cost}){inversion_note(metrics)} [{knobs}]")
    if outcome.status is TrialStatus.ok:
        return (f"{head}: goodput {metrics['goodput_rps']:.4g} req/s, attainment {metrics['slo_attainment']:.3f}, "
                f"output {metrics['output_tok_s']:.4g} tok/s, E2E p99 {metrics['e2e_p99_s']:.3g} s [{knobs}]")
    return f"{head}: {outcome.status.value.upper()}: {mask_text(outcome.reason or '')} [{knobs}]"


def inversion_note(metrics: dict[str, float]) -> str:
    """`; not monotone: ...` when a probe passed above a failing one (`measure.measure.inversions`), else ''."""
    if "inversion_pass_scale" not in metrics:
        return ""
    window_rps = metrics["capacity_rps"] / metrics["capacity_scale"] if metrics.get("capacity_scale") else None

    def rate(scale: float) -> str:
        return f"{scale * window_rps:.4g} req/s" if window_rps else f"x{scale:.4g}"
    return (f"; pass/fail not monotone in the rate: passed at {rate(metrics['inversion_pass_scale'])} above a fail "
            f"at {rate(metrics['inversion_fail_scale'])}, capacity settled below every fail")


def interrupted_line(study: optuna.Study, storage: str, signal_name: str) -> str:
    """What a signal left: the trials measured (in the storage), the trial re-queued, how to go on."""
    trials = study.get_trials(deepcopy=False)
    measured = sum(t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED) for t in trials)
    waiting = {n for t in trials if t.state is optuna.trial.TrialState.WAITING
               for n in t.system_attrs.get("retry_history", ())}
    requeued = [t.number for t in trials if t.number in waiting and t.user_attrs.get("status") == INTERRUPTED]
    again = f"trial {', '.join(map(str, requeued))} re-enqueued" if requeued else "no trial was running"
    kept = KeptMeasurements(study).count()
    conclusion = f"; {kept} measurements of the conclusion kept" if kept else ""
    return (f"interrupted ({signal_name}): {measured} trials measured are saved in {mask_text(storage)}{conclusion}; "
            f"{again}; resume with the same command")


class _NoTracebackForTrialFailed(logging.Filter):
    """Optuna logs a caught exception with its traceback; a failed trial's reason is already one console line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], TrialFailed):
            record.exc_info, record.exc_text = None, None
        return True


def quiet_failed_trial_tracebacks() -> None:
    optuna_logger = logging.getLogger("optuna.study._optimize")
    if not any(isinstance(f, _NoTracebackForTrialFailed) for f in optuna_logger.filters):
        optuna_logger.addFilter(_NoTracebackForTrialFailed())


log = logging.getLogger("pagetune")


class LogProgress:
    """A bar's surface (`update`, `total`, `refresh`, `close`) as a log line per step: `DESC: k of N (elapsed;
    about T left)`, for output that is not a terminal."""

    def __init__(self, total: int, desc: str, clock=time.monotonic) -> None:
        self.total, self.desc, self.n = total, desc, 0
        self._clock = clock
        self._began = clock()

    def update(self, n: int = 1) -> None:
        self.n += n
        log.info(self.line())

    def line(self) -> str:
        elapsed = self._clock() - self._began
        left = (f"; about {_duration(elapsed / self.n * (self.total - self.n))} left"
                if 0 < self.n < self.total else "")
        return f"{self.desc}: {self.n} of {self.total} ({_duration(elapsed)}{left})"

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        pass


LONG_REPLAY_S = 30.0  # a replay at least this long says itself in a log (a real one; a simulated one is shorter)


class ReplayLines:
    """Where no bar is drawn: a line for each replay that took at least `LONG_REPLAY_S` (a real probe replays its
    window for a minute or more; without it, a log says nothing until the trial ends), said when the next replay
    begins or the trial ends. Its time runs from the replay's first finished request to its last."""

    def __init__(self, clock=time.monotonic) -> None:
        self._clock = clock
        self._label, self._began, self._last, self._done, self._total = "", 0.0, 0.0, 0, 0

    def update(self, label: str, done: int, total: int) -> None:
        now = self._clock()
        if label != self._label:
            self.flush()
            self._label, self._began = label, now
        self._last, self._done, self._total = now, done, total

    def flush(self) -> None:
        if self._label and self._last - self._began >= LONG_REPLAY_S:
            log.info(f"{self._label}: {self._done} of {self._total} requests finished over "
                     f"{_duration(self._last - self._began)}")
        self._label = ""


def _duration(seconds: float) -> str:
    """`42 s`, `3 min 05 s`, `1 h 02 min`."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    return f"{s // 60} min {s % 60:02d} s" if s < 3600 else f"{s // 3600} h {s % 3600 // 60:02d} min"


class Console:
    def __init__(self, interactive: bool | None = None, clock=time.monotonic) -> None:
        """`interactive`: bars (a terminal) or lines (a log); None: whether stderr is a terminal."""
        self.interactive = sys.stderr.isatty() if interactive is None else interactive
        self._redirect = contextlib.ExitStack()  # log records above the bars while they are up
        self._trials: tqdm | None = None
        self._replay: tqdm | None = None
        self._label = ""  # the replay the replay bar shows
        self._replay_lines = None if self.interactive else ReplayLines(clock)

    def line(self, text: str) -> None:
        log.info(text)

    def lines(self, texts: list[str]) -> None:
        for text in texts:
            self.line(text)

    def start_trials(self, total: int, done: int, requests: int) -> None:
        if not self.interactive:  # each trial says itself in its line
            return
        self._redirect.enter_context(logging_redirect_tqdm())
        self._trials = tqdm(total=total, initial=done, desc="trials", unit="trial", position=0)
        self._replay = tqdm(total=requests, desc="replay", unit="req", position=1, leave=False)

    def progress(self, trial: int, probe: int, scale: float, done: int, total: int) -> None:
        label = f"trial {trial} replay {probe} at x{scale:.3g}"
        if self._replay_lines is not None:
            self._replay_lines.update(label, done, total)
        if self._replay is None:
            return
        if self._label != label:  # a new replay: its own count and rate
            self._label = label
            self._replay.reset(total)
            self._replay.set_description(label, refresh=False)
        self._replay.update(done - self._replay.n)

    def trial_end(self, trial: optuna.trial.Trial, outcome: TrialOutcome, metrics: dict[str, float]) -> None:
        if self._replay_lines is not None:
            self._replay_lines.flush()
        if self._trials is not None:
            self._trials.update(1)
        self.line(trial_line(trial, outcome, metrics))
        if is_baseline(trial) and metrics.get("saturated"):
            self.line(SATURATED_WARNING)

    def end_trials(self) -> None:
        if self._replay_lines is not None:
            self._replay_lines.flush()
        for bar in (self._replay, self._trials):
            if bar is not None:
                bar.close()
        self._trials = self._replay = None
        self._redirect.close()

    def bar(self, total: int, desc: str) -> tqdm | LogProgress:
        if not self.interactive:
            return LogProgress(total, desc)
        return tqdm(total=total, desc=desc, unit="measurement", leave=False)

    @staticmethod
    def retotal(bar: tqdm | LogProgress, total: int) -> None:
        """What will run, once it is known (the finalists found, the pick made): the bar and its ETA count it."""
        bar.total = total
        bar.refresh()

    def close(self) -> None:
        self.end_trials()
