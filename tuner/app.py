"""`python -m tuner +traffic=PATH [overrides]`: the whole job, start to finish.

    compose + validate (Hydra, tuner.config) -> traffic (loaded, windowed, split) -> the worker
    (device described) -> space and baseline -> tracking check (fail fast) -> open/resume the study
    -> search (trials in the worker) -> conclude (finalists re-measured, pick, proof, verdict)
    -> report, best.yaml, vllm.yaml (atomic) -> plots -> MLflow -> the console summary

With `replay.target` (a deployed OpenAI-compatible server) the traffic step is the same, then the server is
measured once over HTTP, as it is (tuner.results.endpoint): no worker, no search, no best.yaml.

This process never imports torch: trials run in the worker (tuner.executors.supervisor).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import signal
import sys
import warnings
from pathlib import Path

import optuna
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from runtime import ConfigError, engine_limits, has_tokenizer, model_info
from tuner.config import AppConfig, SloConfig, TunerConfigError, load_app_config
from tuner.console import Console, interrupted_line, quiet_failed_trial_tracebacks
from tuner.executors.base import WorkerStartError
from tuner.executors.http import HttpExecutor
from tuner.executors.selection import Executors, open_executors
from tuner.interrupts import Interrupted, Interrupts
from tuner.measure.measure import highest_scale
from tuner.measure.metrics import allowed_failures
from tuner.measure.plan import Rates
from tuner.model_tokenizer import ModelTokenizer
from tuner.redact import mask_text, mask_url
from tuner.results.conclude import NoBaseline, conclude
from tuner.results.endpoint import measure_endpoint
from tuner.results.export import ExportError, write_exports
from tuner.results.fidelity import fidelity
from tuner.results.report import render_report, study_note, verdict_text
from tuner.results.summary import (
    export_metadata,
    grouped_arrivals,
    report_inputs,
    study_history,
    study_metrics,
    study_plots,
    summary_lines,
)
from tuner.search.baseline import baseline_config
from tuner.search.identity import study_identity
from tuner.search.objective import TrialRunner
from tuner.search.space import SearchSpace
from tuner.search.study import open_study, run_search, trials_counted
from tuner.store.heartbeat import JournalHeartbeat
from tuner.store.retry import storage_failure
from tuner.tracking import TAG_NOTE, RunState, Tracker, TrackingError, open_tracker, review_link
from tuner.traffic import (
    ReplayWindow,
    TrafficError,
    TrafficLoad,
    arrival_rate,
    load_traffic,
    peak_rate,
    select,
    split_windows,
)
from tuner.vllm import vllm_yaml

log = logging.getLogger("pagetune")


def _load(app: AppConfig) -> TrafficLoad:
    info = model_info(app.runtime.model.name)
    limit = engine_limits(app.runtime, info).max_model_len  # the runtime's rule, every cap
    with ModelTokenizer(app.runtime.model.name) as tok:  # its process starts only on the traffic's first text
        text = {"tokenizer": tok.encode, "chat_tokenizer": tok.chat} if has_tokenizer(app.runtime.model.name) else {}
        traffic = load_traffic(app.traffic, fmt=app.traffic_format.value, on_error=app.replay.on_error.value,
                               vocab_size=info.vocab_size, max_model_len=limit,
                               long_prompts=app.replay.long_prompts.value, **text)
    if tok.used:
        log.info("traffic text: tokenized with %s's own tokenizer and chat template", app.runtime.model.name)
    if traffic.rejected_share > app.replay.max_rejected_share:
        raise TrafficError(
            f"{app.traffic}: {traffic.rejected_too_long} of {traffic.rejected_too_long + len(traffic.requests)} "
            f"requests ({traffic.rejected_share:.1%}) need more than max_model_len {limit} tokens (prompt + output) "
            f"and would be rejected, above replay.max_rejected_share {app.replay.max_rejected_share:.0%}: pass "
            "replay.long_prompts=truncate, or raise runtime.scheduler.max_model_len (the model allows "
            f"{info.max_position_embeddings})")
    return traffic


def _windows(app: AppConfig, traffic: TrafficLoad) -> tuple[ReplayWindow, ReplayWindow | None, Rates]:
    requests = select(traffic.requests, start_s=app.replay.start_s, duration_s=app.replay.duration_s,
                      max_requests=app.replay.max_requests, sample=app.replay.sample, seed=app.replay.seed,
                      time_scale=app.replay.time_scale)
    held = app.validation.holdout_fraction > 0
    _require_duration(app, "selection", requests, app.replay.min_window_s * (2 if held else 1))
    split = split_windows(requests, app.validation.holdout_fraction, app.replay.min_window_s)
    search = ReplayWindow("search", split.search, arrival_rate(split.search))
    if not math.isfinite(search.rate_rps):
        raise TrafficError(f"{app.traffic}: the {len(split.search)} requests of the search window arrive at once: "
                           "there is no arrival rate to scale; replay a longer window (replay.duration_s, "
                           "replay.max_requests)")
    held_out = ReplayWindow("validation", split.validation, arrival_rate(split.validation))
    if not math.isfinite(held_out.rate_rps):  # none, one, or all at once: the proof replays the search window
        held_out = None
    rates = Rates(search.rate_rps, search.rate_rps / app.replay.time_scale, peak_rate(traffic.requests))
    for window in (search, held_out):
        _warn_if_no_miss_allowed(window, app.slo)
    log.info("windows: %s", "; ".join(_reach(app, w) for w in (search, held_out) if w is not None))
    return search, held_out, rates


def _span(window: ReplayWindow) -> float:
    return window.requests[-1].arrival_s - window.requests[0].arrival_s


def _reach(app: AppConfig, window: ReplayWindow) -> str:
    """What a window can show: the fastest rate at which it still spans replay.min_window_s."""
    name = "held-out" if window.key == "validation" else window.key
    top = window.rate_rps * highest_scale(_span(window), app.replay.min_window_s)
    return (f"{name} {len(window.requests)} requests over {_span(window):.4g} s ({window.rate_rps:.4g} req/s), "
            f"capacities up to {top:.4g} req/s (held for replay.min_window_s={app.replay.min_window_s:g} s)")


def _require_duration(app: AppConfig, name: str, requests: tuple, needed_s: float) -> None:
    """A window shorter than replay.min_window_s at its own rate cannot show a capacity even at that rate."""
    span = requests[-1].arrival_s - requests[0].arrival_s if requests else 0.0
    if span >= needed_s:
        return
    rate, minimum = arrival_rate(requests), app.replay.min_window_s
    top = (len(requests) - 1) / minimum if minimum > 0 else math.inf
    raise TrafficError(
        f"{app.traffic}: the {name} spans {span:.4g} s ({len(requests)} requests, {rate:.4g} req/s), under the "
        f"{needed_s:g} s it needs: a capacity is a rate held for replay.min_window_s={minimum:g} s, so a window of "
        f"{len(requests)} requests shows none above {top:.4g} req/s, and the held-out window takes the last "
        "replay.min_window_s seconds at least. Replay a longer window (replay.duration_s, replay.max_requests), "
        "or lower replay.min_window_s")


def _warn_if_no_miss_allowed(window: ReplayWindow | None, slo: SloConfig) -> None:
    """Below 1 / (1 - attainment) requests, one miss fails a replay: the capacity is its worst request's."""
    if window is None or slo.attainment >= 1.0 or allowed_failures(len(window.requests), slo) > 0:
        return
    needed = math.ceil(1.0 / (1.0 - slo.attainment) - 1e-9)
    log.warning("the %s window has %d requests: at slo.attainment %g not one may miss, so its capacity is set by "
                "its slowest request and varies from replay to replay; %d or more requests let one miss (a longer "
                "window: replay.duration_s, replay.max_requests, validation.holdout_fraction)", window.key,
                len(window.requests), slo.attainment, needed)


def _mask_hydra_record(hydra: DictConfig) -> None:
    """Hydra saved the config and the command line (`.hydra/*.yaml`) before the job started: mask credentials."""
    if hydra.output_subdir is None:
        return
    for path in (Path(hydra.runtime.output_dir) / hydra.output_subdir).glob("*.yaml"):
        text = path.read_text(encoding="utf-8")
        if mask_text(text) != text:
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(mask_text(text), encoding="utf-8")
            os.replace(tmp, path)


class Refused(Exception):
    """The job stops before its first trial: one line says why, and the output folder is removed."""


def run(cfg: DictConfig) -> int:
    _mask_hydra_record(HydraConfig.get())
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # one line per trial is ours (tuner.console)
    quiet_failed_trial_tracebacks()
    # MLflow logs each database error with its traceback before raising it: the tracker retries it through an
    # outage (storage.retry_s) or reports it in one line.
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # RDB heartbeats
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        with Interrupts().installed() as interrupts:
            return _job(cfg, out_dir, interrupts)
    except Interrupted as e:  # before the study opened: nothing to save
        print(f"interrupted ({signal.Signals(e.signum).name}) before the first trial", file=sys.stderr)
        return e.exit_code
    except Refused as e:
        print(f"error: {e}", file=sys.stderr)
        _discard_output(out_dir)
        return 2
    except Exception as e:
        failure = storage_failure(e, str(OmegaConf.select(cfg, "storage.url", default="")))
        if failure is None:
            raise
        print(f"error: {failure}", file=sys.stderr)  # the root cause, not Optuna's symptom on top of it
        return 1


def _discard_output(out_dir: Path) -> None:
    """Remove what this run put in its output folder before it stopped (Hydra's record, the log), and the
    folder when that leaves it empty: a refused command leaves no litter. Nothing else is touched."""
    shutil.rmtree(out_dir / ".hydra", ignore_errors=True)
    (out_dir / "pagetune.log").unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        out_dir.rmdir()


def _inputs(app: AppConfig) -> tuple[TrafficLoad, ReplayWindow, ReplayWindow | None, Rates]:
    try:
        traffic = _load(app)
        return (traffic, *_windows(app, traffic))
    except (TunerConfigError, TrafficError, ConfigError) as e:
        raise Refused(str(e)) from None


def _config(cfg: DictConfig) -> AppConfig:
    try:
        return load_app_config(cfg)
    except (TunerConfigError, ConfigError) as e:
        raise Refused(str(e)) from None


def _executors(app: AppConfig, interrupts: Interrupts) -> Executors:
    """What runs the trials (simulating: the profile's model is the runtime's)."""
    try:
        return open_executors(app, interrupts)
    except (TunerConfigError, ConfigError, WorkerStartError) as e:
        raise Refused(str(e)) from None


def _job(cfg: DictConfig, out_dir: Path, interrupts: Interrupts) -> int:
    app = _config(cfg)
    if app.replay.target is not None:
        return _endpoint(app, out_dir)
    executors = _executors(app, interrupts)
    app = executors.app
    console = Console()
    try:
        traffic, search, held_out, rates = _inputs(app)
        console.line(f"traffic: {traffic.summary()}")
        if arrivals := grouped_arrivals(search):  # said before the search: it can leave no rate meeting the SLO
            console.line(f"arrivals: {arrivals}")
        console.lines(list(executors.notes))
        hardware = executors.search.describe(app.runtime)
        try:
            inert = app.runtime.inert_fields(hardware.device_type) | hardware.unmodelled
            space = SearchSpace.from_config(app.search, inert)
            baseline, source = baseline_config(app, hardware, space)
        except (TunerConfigError, ConfigError) as e:
            raise Refused(str(e)) from None
        console.line(f"device: {hardware.summary} ({hardware.versions}); baseline: {source}")
        if space.inert:
            where = "in simulation" if hardware.unmodelled else f"on {hardware.device_type}"
            console.line(f"not searched, no effect {where}: {', '.join(space.inert)}")
        return _study(app, cfg, traffic, space, baseline, search, held_out, rates, executors, console, hardware,
                      out_dir)
    except WorkerStartError as e:
        raise Refused(str(e)) from None
    finally:
        executors.close()
        console.close()


def _endpoint(app: AppConfig, out_dir: Path) -> int:
    """`replay.target`: the server measured as it is deployed, on the search window; nothing searched."""
    traffic, search, _, rates = _inputs(app)
    console = Console()
    console.line(f"traffic: {traffic.summary()}")
    executor = HttpExecutor(app.replay.target)
    try:
        return measure_endpoint(app, traffic, search, rates, executor, executor.describe(app.runtime), console,
                                out_dir)
    except (WorkerStartError, TrackingError) as e:
        raise Refused(str(e)) from None
    finally:
        console.close()


def _study(app, cfg, traffic, space, baseline, search, held_out, rates, executors: Executors, console, hardware,
           out_dir: Path) -> int:
    """Tracking checked, the study opened (refused if it measures something else), then the parent run."""
    try:
        tracker = open_tracker(app, out_dir)
    except TrackingError as e:
        raise Refused(str(e)) from None
    identity = study_identity(app, traffic.sha256, executors.sim.sha256 if executors.sim else None,
                              executors.identity)
    parent: list[str] = []  # the parent run, once started: stale trials found before that have no MLflow run

    def on_stale(study, stale):
        optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=app.storage.max_retry)(study, stale)
        alive = {t.number for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))}
        if parent:
            tracker.mark_stale_running(parent[0], alive - {stale.number})

    try:
        study = open_study(app, identity, space, space.values_of(baseline), on_stale)
    except TunerConfigError as e:
        raise Refused(str(e)) from None
    parent.append(tracker.start_study(identity.name, OmegaConf.to_yaml(cfg),
                                      {"pagetune.traffic_sha256": traffic.sha256,
                                       "pagetune.fingerprint": identity.fingerprint,
                                       "pagetune.storage": mask_url(app.storage.url),
                                       "pagetune.figures": executors.figures},
                                      identity.params()))
    try:
        return _tune(app, study, space, baseline, traffic, search, held_out, rates, executors, tracker, parent[0],
                     console, hardware, on_stale, out_dir)
    except Interrupted as e:
        tracker.finish_study(parent[0], RunState.KILLED)
        console.close()
        print(interrupted_line(study, app.storage.url, signal.Signals(e.signum).name), file=sys.stderr)
        return e.exit_code
    except ExportError as e:
        tracker.finish_study(parent[0], RunState.FAILED)
        print(f"error: {e}; the trials are kept in {mask_url(app.storage.url)}: rerun the same command once the "
              "folder can take the results (the study concludes again)", file=sys.stderr)
        return 1
    except BaseException:
        tracker.finish_study(parent[0], RunState.FAILED)
        raise


def _tune(app, study, space, baseline, traffic, search, held_out, rates, executors: Executors, tracker, parent,
          console, hardware, on_stale, out_dir: Path) -> int:
    console.start_trials(app.tuner.n_trials, min(trials_counted(study), app.tuner.n_trials), len(search.requests))
    heartbeat = None
    if app.storage.backend.value == "journal":
        heartbeat = JournalHeartbeat(app.storage.url, app.storage.heartbeat_interval_s, app.storage.grace_period_s,
                                     on_stale)
    runner = TrialRunner(app, space, executors.search, search, rates, baseline, tracker, parent, console.trial_end,
                         console.progress, heartbeat, executors.interrupts, on_stale, executors.figures)
    run_search(study, runner, app.tuner.n_trials, app.tuner.timeout_s, runner.fail_stale, executors.interrupts)
    console.end_trials()
    interrupts = executors.interrupts or Interrupts()
    bar = console.bar(0, "re-measuring finalists and baseline")
    try:
        c = conclude(executors.measure, app, study, search, held_out, lambda: bar.update(1),
                     lambda total: console.retotal(bar, total))
    except NoBaseline as e:
        print(f"error: {e}", file=sys.stderr)
        tracker.finish_study(parent, RunState.FAILED)
        return 1
    finally:
        bar.close()
    interrupts.check()  # between phases too: the conclusion is kept, a rerun exports it
    try:
        plot_paths = study_plots(app, study, c, out_dir / "plots", (held_out or search).rate_rps)
    except OSError as e:
        raise ExportError(e.filename or out_dir / "plots", e) from None
    interrupts.check()
    checked = (fidelity(c, executors.sim, out_dir, app, held_out)
               if executors.sim and executors.measure is not executors.sim else None)
    simulated = executors.sim is not None and executors.measure is executors.sim  # the verdict's figures
    inputs = report_inputs(app, study, c, traffic, rates, (search, held_out), space.inert,
                           [p.name for p in plot_paths], list(HydraConfig.get().overrides.task), executors.figures,
                           checked.lines if checked else (), simulated,
                           vllm_yaml(c.exported.config.to_dict()).unexpressed)
    paths = write_exports(out_dir, runtime=c.exported.config.to_dict(),
                          metadata=export_metadata(app, study, c, traffic, hardware.summary, executors.figures,
                                                   simulated),
                          report_md=render_report(inputs))
    refit = [checked.refit_path] if checked and checked.refit_path else []
    failed = [*c.selection.failed, *c.proof.failed]  # each with its reason, as the console and report say
    tracker.log_study_artifacts(parent, [paths.best, paths.vllm, paths.report, *plot_paths, *refit],
                                study_metrics(c), {"pagetune.verdict": verdict_text(c, simulated),
                                                   TAG_NOTE: study_note(inputs),
                                                   **({"pagetune.remeasure_failed": "; ".join(failed)[:4000]}
                                                      if failed else {})}, study_history(study))
    tracker.finish_study(parent)
    link = review_link(tracker.experiment_id(), parent) if isinstance(tracker, Tracker) and tracker.enabled else ""
    console.lines(summary_lines(c, inputs, paths, app.tracking.uri, link))
    if checked:
        console.lines(["simulated and measured:", *[f"  {line}" for line in checked.lines]])
    return 0

