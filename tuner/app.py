"""`python -m tuner +traffic=PATH [overrides]`: the whole job, start to finish.

    compose + validate (Hydra, tuner.config) -> load traffic -> tracking check (fail fast)
    -> open/resume the study -> search (trials in the worker) -> pick best vs baseline
    -> validation replays -> report, best.yaml, vllm.yaml (atomic) -> plots -> MLflow -> summary
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from pathlib import Path

import optuna
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

from runtime.model.loader import load_config
from tuner.config import AppConfig, StorageBackend, TunerConfigError, load_app_config
from tuner.export import build_metadata, write_exports
from tuner.journal_heartbeat import JournalHeartbeat
from tuner.locking import store_lock
from tuner.outputs import study_plots, summary_lines, write_report
from tuner.redact import mask_text, mask_url
from tuner.space import SearchSpace
from tuner.study import TrialRunner, open_study, run_search, trials_counted
from tuner.supervisor import WorkerSupervisor
from tuner.tracking import RunState, Tracker, TrackingError
from tuner.traffic import TrafficError, TrafficLoad, load_traffic, select, split_windows
from tuner.trial import TrialOutcome, TrialStatus
from tuner.validate import pick, validate

log = logging.getLogger("pagetune")


def _load(app: AppConfig) -> TrafficLoad:
    model = load_config(app.runtime.model.name)
    max_len = app.runtime.scheduler.max_model_len or model.max_position_embeddings
    return load_traffic(app.traffic, fmt=app.traffic_format.value, on_error=app.replay.on_error.value,
                        vocab_size=model.vocab_size, max_model_len=max_len,
                        long_prompts=app.replay.long_prompts.value)


def _trial_line(trial: optuna.trial.Trial, outcome: TrialOutcome) -> str:
    m = outcome.metrics
    knobs = ", ".join(f"{k}={v}" for k, v in trial.params.items())
    if outcome.status is TrialStatus.ok:
        return (f"trial {trial.number}: goodput {m['goodput_rps']:.3f} req/s, ttft p99 {m['ttft_p99_s']:.3f} s, "
                f"tpot p99 {m['tpot_p99_s']:.4f} s [{knobs}]")
    return f"trial {trial.number}: {outcome.status.value.upper()}: {mask_text(outcome.reason or '')} [{knobs}]"


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


def run(cfg: DictConfig) -> int:
    _mask_hydra_record(HydraConfig.get())
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # one line per trial is ours (_trial_line)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # RDB heartbeats
    try:
        app = load_app_config(cfg)
        traffic = _load(app)
        space = SearchSpace.from_config(app.search)
    except (TunerConfigError, TrafficError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    if traffic.skipped_count:
        print(f"traffic: skipped {traffic.skipped_count} bad lines of {app.traffic} (replay.on_error=skip)")
    requests = select(traffic.requests, start_s=app.replay.start_s, duration_s=app.replay.duration_s,
                      max_requests=app.replay.max_requests, sample=app.replay.sample, seed=app.replay.seed,
                      time_scale=app.replay.time_scale)
    windows = split_windows(requests, app.validation.holdout_fraction)
    try:
        with store_lock(app.tracking.uri, "mlflow-tables"):  # workers starting together on a fresh store
            tracker = Tracker(app.tracking.uri, app.tracking.experiment, app.tracking.on_unreachable,
                              fallback_path=out_dir / "tracking-fallback.jsonl").check()
    except TrackingError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    parent = tracker.start_study(app.tuner.study_name, OmegaConf.to_yaml(cfg),
                                 {"pagetune.traffic_sha256": traffic.sha256,
                                  "pagetune.storage": mask_url(app.storage.url)})
    supervisor = WorkerSupervisor(app.tuner.worker_threads, app.tuner.worker_memory_gb)
    try:
        return _tune(app, space, traffic, windows, tracker, parent, supervisor, out_dir)
    except BaseException:
        tracker.finish_study(parent, RunState.FAILED)
        raise
    finally:
        supervisor.close()


def _tune(app, space, traffic, windows, tracker, parent, supervisor, out_dir: Path) -> int:
    bar = tqdm(total=app.tuner.n_trials, desc="trials", unit="trial", position=0)
    replay_bar = tqdm(total=len(windows.search), desc="replay", unit="req", position=1, leave=False)

    def on_progress(number: int, done: int, total: int) -> None:
        replay_bar.set_description(f"trial {number} replay")
        replay_bar.n = done
        replay_bar.refresh()

    def on_trial_end(trial, outcome):
        replay_bar.n = 0
        replay_bar.refresh()
        bar.update(1)
        bar.write(_trial_line(trial, outcome))

    def on_stale(study, stale):
        optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=app.storage.max_retry)(study, stale)
        alive = {t.number for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))}
        tracker.mark_stale_running(parent, alive - {stale.number})

    study = open_study(app, space, on_stale)
    bar.update(min(trials_counted(study), app.tuner.n_trials))
    heartbeat = None
    if app.storage.backend is StorageBackend.journal:
        heartbeat = JournalHeartbeat(app.storage.url, app.storage.heartbeat_interval_s, app.storage.grace_period_s,
                                     on_stale)
    runner = TrialRunner(app, space, supervisor, windows.search, "search", tracker, parent, on_trial_end, on_progress,
                         heartbeat)
    run_search(study, runner, app.tuner.n_trials, app.tuner.timeout_s)
    replay_bar.close()
    bar.close()
    picked = pick(study, app)
    validation = validate(supervisor, app, picked, windows.search, windows.validation)
    report = write_report(app, study, picked, validation, traffic)
    metadata = build_metadata(study=app.tuner.study_name, trial=picked.best.number,
                              metrics=picked.best.user_attrs["metrics"], traffic_sha256=traffic.sha256,
                              model=app.runtime.model.name)
    paths = write_exports(out_dir, runtime=picked.best.user_attrs["runtime"], metadata=metadata, report_md=report)
    plots = study_plots(app, study, validation, out_dir / "plots")
    tracker.log_study_artifacts(parent, [paths.best, paths.vllm, paths.report, *plots],
                                {f"best_{k}": v for k, v in picked.best.user_attrs["metrics"].items()})
    tracker.finish_study(parent)
    print("\n".join(summary_lines(app, picked, paths)))
    return 0
