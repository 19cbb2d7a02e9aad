"""`python -m tuner +traffic=PATH [overrides]`: the whole job, start to finish.

    compose + validate (Hydra, tuner.config) -> the edge, once (tuner.study_run: executors, traffic windows,
    device, space and baseline, identity) -> tracking check (fail fast) -> open/resume the study
    -> search (trials in the worker) -> conclude (finalists re-measured, pick, proof, verdict)
    -> report, best.yaml, vllm.yaml (atomic) -> plots -> MLflow -> the console summary

Past the edge no phase takes the whole config: each takes the built objects (`StudyRun`) and the sections it reads.

With `replay.target` (a deployed OpenAI-compatible server) the traffic step is the same, then the server is
measured once over HTTP, as it is (tuner.results.endpoint): no worker, no search, no best.yaml.

This process never imports torch: trials run in the worker (tuner.executors.supervisor).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import optuna
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from runtime import ConfigError
from tuner.config import AppConfig, TunerConfigError, load_app_config
from tuner.console import Console, interrupted_line, quiet_failed_trial_tracebacks
from tuner.executors.base import WorkerStartError
from tuner.executors.http import HttpExecutor
from tuner.inputs import study_inputs
from tuner.interrupts import Interrupted, Interrupts
from tuner.redact import mask_text, mask_url
from tuner.results.conclude import Conclusion, NoBaseline, conclude
from tuner.results.endpoint import measure_endpoint
from tuner.results.export import ExportError, write_exports
from tuner.results.fidelity import Fidelity, fidelity
from tuner.results.report import render_report, study_note, verdict_text
from tuner.results.summary import (
    export_metadata,
    report_inputs,
    study_history,
    study_metrics,
    study_plots,
    summary_lines,
)
from tuner.search.objective import Objective
from tuner.search.recorder import TrialRecorder
from tuner.search.stale import StaleTrials
from tuner.search.study import open_study, run_search, trials_counted
from tuner.store.heartbeat import JournalHeartbeat
from tuner.store.retry import storage_failure
from tuner.study_run import StudyRun, open_study_run
from tuner.tracking import TAG_NOTE, FallbackTracker, RunState, Tracker, TrackingError, open_tracker, review_link
from tuner.traffic import TrafficError
from tuner.vllm import vllm_yaml

log = logging.getLogger("pagetune")


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


@contextlib.contextmanager
def _refusing(*errors: type[Exception]) -> Iterator[None]:
    """One of `errors` before the first trial refuses the job (`Refused`: its line, the output folder removed)."""
    try:
        yield
    except errors as e:
        raise Refused(str(e)) from None


def _config(cfg: DictConfig) -> AppConfig:
    with _refusing(TunerConfigError, ConfigError):
        return load_app_config(cfg)


def _job(cfg: DictConfig, out_dir: Path, interrupts: Interrupts) -> int:
    app = _config(cfg)
    console = Console()
    try:
        if app.replay.target is not None:  # the server measured as it is deployed, on the search window
            with _refusing(TunerConfigError, TrafficError, ConfigError):
                inputs = study_inputs(app)
            console.line(f"traffic: {inputs.traffic.summary()}")
            executor = HttpExecutor(app.replay.target)
            with _refusing(WorkerStartError, TrackingError):
                return measure_endpoint(app, inputs.traffic, inputs.search, inputs.rates, executor,
                                        executor.describe(app.runtime), console, out_dir)
        with _refusing(TunerConfigError, TrafficError, ConfigError, WorkerStartError):
            run = open_study_run(app, console, interrupts)
        with contextlib.closing(run.executors), _refusing(WorkerStartError):
            with _refusing(TrackingError):  # checked before the study opens: fail fast
                tracker = open_tracker(run.tracking, run.storage.retry_s, out_dir)
            return _study(run, tracker, OmegaConf.to_yaml(cfg), console, out_dir)
    finally:
        console.close()


def _study(run: StudyRun, tracker: Tracker | FallbackTracker, config_yaml: str, console: Console,
           out_dir: Path) -> int:
    """The study opened (refused if it measures something else), then the parent run, the search, the rest."""
    parent: list[str] = []  # the parent run, once started: stale trials found before that have no MLflow run

    def on_stale(study, stale):
        optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=run.storage.max_retry)(study, stale)
        alive = {t.number for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))}
        if parent:
            tracker.mark_stale_running(parent[0], alive - {stale.number})

    with _refusing(TunerConfigError):
        study = open_study(run.measuring.tuner, run.storage, run.identity, run.space,
                           run.space.values_of(run.baseline), on_stale)
    parent.append(tracker.start_study(run.identity.name, config_yaml,
                                      {"pagetune.traffic_sha256": run.inputs.traffic.sha256,
                                       "pagetune.fingerprint": run.identity.fingerprint,
                                       "pagetune.storage": mask_url(run.storage.url),
                                       "pagetune.figures": run.executors.figures},
                                      run.identity.params()))
    recorder = TrialRecorder(tracker, parent[0], run.executors.figures)
    try:
        _search(run, study, recorder, on_stale, console)
        return _conclude(run, study, recorder, console, out_dir)
    except Interrupted as e:
        tracker.finish_study(parent[0], RunState.KILLED)
        console.close()
        print(interrupted_line(study, run.storage.url, signal.Signals(e.signum).name), file=sys.stderr)
        return e.exit_code
    except ExportError as e:
        tracker.finish_study(parent[0], RunState.FAILED)
        print(f"error: {e}; the trials are kept in {mask_url(run.storage.url)}: rerun the same command once the "
              "folder can take the results (the study concludes again)", file=sys.stderr)
        return 1
    except BaseException:
        tracker.finish_study(parent[0], RunState.FAILED)
        raise


def _search(run: StudyRun, study: optuna.Study, recorder: TrialRecorder, on_stale, console: Console) -> None:
    """Trials until the study holds tuner.n_trials: the objective, with stale trials failed and handed over."""
    tuner, storage, executors = run.measuring.tuner, run.storage, run.executors
    console.start_trials(tuner.n_trials, min(trials_counted(study), tuner.n_trials), len(run.inputs.search.requests))
    heartbeat = None
    if storage.backend.value == "journal":
        heartbeat = JournalHeartbeat(storage.url, storage.heartbeat_interval_s, storage.grace_period_s, on_stale)
    objective = Objective(run.measuring, run.runtime, run.quality, run.space, executors.search, run.inputs.search,
                          run.inputs.rates, run.baseline, recorder, console.trial_end, console.progress, heartbeat,
                          executors.interrupts)
    stale = StaleTrials(tuner.trial_timeout_s + storage.grace_period_s, heartbeat, on_stale)
    run_search(study, objective, tuner.n_trials, tuner.timeout_s, stale, executors.interrupts)
    console.end_trials()


def _conclude(run: StudyRun, study: optuna.Study, recorder: TrialRecorder, console: Console, out_dir: Path) -> int:
    """Finalists re-measured, the pick proved; then the report, the exports, the plots and MLflow."""
    executors, inputs = run.executors, run.inputs
    interrupts = executors.interrupts or Interrupts()
    bar = console.bar(0, "re-measuring finalists and baseline")
    try:
        c = conclude(executors.measure, run.measuring, run.validation, study, inputs.search, inputs.held_out,
                     lambda: bar.update(1), lambda total: console.retotal(bar, total))
    except NoBaseline as e:
        print(f"error: {e}", file=sys.stderr)
        recorder.tracker.finish_study(recorder.parent_run_id, RunState.FAILED)
        return 1
    finally:
        bar.close()
    interrupts.check()  # between phases too: the conclusion is kept, a rerun exports it
    try:
        proof_rate = (inputs.held_out or inputs.search).rate_rps
        plot_paths = study_plots(run.measuring, study, c, out_dir / "plots", proof_rate)
    except OSError as e:
        raise ExportError(e.filename or out_dir / "plots", e) from None
    interrupts.check()
    checked = (fidelity(c, executors.sim, out_dir, run.measuring, inputs.held_out)
               if executors.sim and executors.measure is not executors.sim else None)
    return _report(run, study, c, checked, plot_paths, recorder, console, out_dir)


def _report(run: StudyRun, study: optuna.Study, c: Conclusion, checked: Fidelity | None, plot_paths: list[Path],
            recorder: TrialRecorder, console: Console, out_dir: Path) -> int:
    """report.md, best.yaml and vllm.yaml (together), the parent run's artifacts and figures, the summary."""
    tracker, parent = recorder.tracker, recorder.parent_run_id
    inputs = report_inputs(run, study, c, [p.name for p in plot_paths], list(HydraConfig.get().overrides.task),
                           checked.lines if checked else (), vllm_yaml(c.exported.config.to_dict()).unexpressed)
    paths = write_exports(out_dir, runtime=c.exported.config.to_dict(), metadata=export_metadata(run, study, c),
                          report_md=render_report(inputs))
    refit = [checked.refit_path] if checked and checked.refit_path else []
    failed = [*c.selection.failed, *c.proof.failed]  # each with its reason, as the console and report say
    tracker.log_study_artifacts(parent, [paths.best, paths.vllm, paths.report, *plot_paths, *refit],
                                study_metrics(c), {"pagetune.verdict": verdict_text(c, run.simulated),
                                                   TAG_NOTE: study_note(inputs),
                                                   **({"pagetune.remeasure_failed": "; ".join(failed)[:4000]}
                                                      if failed else {})}, study_history(study))
    tracker.finish_study(parent)
    link = review_link(tracker.experiment_id(), parent) if isinstance(tracker, Tracker) and tracker.enabled else ""
    console.lines(summary_lines(c, inputs, paths, run.tracking.uri, link))
    if checked:
        console.lines(["simulated and measured:", *[f"  {line}" for line in checked.lines]])
    return 0
