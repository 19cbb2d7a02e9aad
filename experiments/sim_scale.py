"""How long a simulated study takes: N trials of `executor=sim` on the full hour of a trace, on this machine.

    python -m experiments.sim_scale --profile conf/profiles/h200-llama-3-8b.json --trials 200
    python -m experiments.sim_scale --profile conf/profiles/h200-llama-3-8b.json --trials 200 --workers 2
    python -m experiments.sim_scale --illustrative --trials 200     # before any profile ships (see below)
    python -m experiments.sim_scale --illustrative --replay 1       # one replay of the whole trace at x1

`--replay SCALE` times one replay of the whole trace through the simulated engine (the baseline runtime
config) and prints its wall time, its steps (and the cost of one) and the simulated busy time. Otherwise
it runs `python -m tuner` (capacity objective, the incumbent pruner, one finalist, the fewest
re-measurement rounds) on the whole trace, then reads the study back: trials by state, the search's wall
time, the per-trial wall time (median, p90, max), and the whole command's. `--workers N` runs N tuner
processes on one study (a journal file, as several workers on one machine share a study: docs/RELIABILITY.md),
one a core; the whole command's time is until the last one ends. `--illustrative` writes a profile of
the llama-3-8b shape with made-up coefficients (labelled so in its device name) to time the simulator
itself: its capacities mean nothing, its cost per simulated hour is what is measured.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna

from runtime import GpuProfile, load_profile, model_info, save_profile
from runtime.sim.profile_file import ActivationFit, DeviceRecord

ROOT = Path(__file__).resolve().parents[1]

# Made-up, plausible magnitudes for an 8B model on a large GPU: 6 ms a step, 15 us a prefill token, 40 us a
# decode row, 15 ns per decode context token. Not a measurement.
ILLUSTRATIVE = (6e-3, 1.5e-5, 1.5e-10, 4e-5, 1.5e-8)


def illustrative_profile(path: Path) -> Path:
    info = model_info("llama-3-8b")
    return save_profile(GpuProfile(
        model="llama-3-8b", model_shape=info._asdict(), dtype="bfloat16",
        device=DeviceRecord("ILLUSTRATIVE 141 GB device (coefficients made up, not measured)", "cuda",
                            150_000_000_000, "n/a"),
        weight_bytes=16_060_522_496, activation=ActivationFit(0.0, 60_000.0, 1_000_000.0),
        coefficients={"bs16/auto/eager": ILLUSTRATIVE}, held_back_error=(0.0, 0.0, 0.0, 0.0),
        command="experiments/sim_scale.py --illustrative"), path)


def replay_once(profile: GpuProfile, trace: Path, scale: float) -> int:
    from runtime import EngineConfig, VirtualClock, engine_limits, sim_engine
    from tuner.measure.replay import replay
    from tuner.traffic import load_traffic, select

    config = EngineConfig.from_flat(profile.model)
    limit = engine_limits(config, profile.info).max_model_len
    traffic = load_traffic(trace, on_error="skip", vocab_size=profile.info.vocab_size, max_model_len=limit,
                           long_prompts="truncate")
    requests = select(traffic.requests, time_scale=scale)
    clock = VirtualClock()
    engine = sim_engine(config, profile, clock)
    steps = 0
    inner = engine.runner.execute

    def counted(out):
        nonlocal steps
        steps += 1
        return inner(out)

    engine.runner.execute = counted
    start = time.perf_counter()
    result = replay(engine, clock, requests)
    wall = time.perf_counter() - start
    print(f"{len(requests)} requests of {trace.name} at x{scale:g}: {wall:.1f} s wall, {steps} steps "
          f"({wall / steps * 1e6:.0f} us a step), {result.busy_s:.0f} s simulated busy time ({profile.label})")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", default=None)
    p.add_argument("--illustrative", action="store_true")
    p.add_argument("--trials", type=int, default=200)
    p.add_argument("--trace", default=str(ROOT.parent / "shared" / "traces" / "azure_llm_2023_code.csv"))
    p.add_argument("--timeout-s", type=float, default=None, help="tuner.timeout_s: start no trial after this")
    p.add_argument("--out", default=None, help="folder for the stores and the output (default: a temp folder)")
    p.add_argument("--replay", type=float, default=None, help="time one replay of the trace at this rate scale")
    p.add_argument("--workers", type=int, default=1, help="tuner processes sharing the study (one a core)")
    a = p.parse_args()
    out = Path(a.out or tempfile.mkdtemp(prefix="sim-scale-"))
    out.mkdir(parents=True, exist_ok=True)
    profile_path = illustrative_profile(out / "illustrative.json") if a.illustrative else Path(a.profile)
    profile: GpuProfile = load_profile(profile_path)
    if a.replay is not None:
        return replay_once(profile, Path(a.trace), a.replay)
    journal = out / "optuna_journal.log"
    args = [sys.executable, "-m", "tuner", f"+traffic={a.trace}", "executor=sim", f"executor.profile={profile_path}",
            f"runtime.model.name={profile.model}", f"tuner.n_trials={a.trials}", "tuner.finalists=1",
            "validation.select_rounds=1", "validation.proof_rounds=2", "replay.long_prompts=truncate",
            "tuner.study_name=scale", f"tracking.uri=sqlite:///{out}/mlflow.db"]
    args += [f"storage.url=sqlite:///{out}/optuna.db"] if a.workers == 1 else ["storage=journal",
                                                                                f"storage.url={journal}"]
    if a.timeout_s:
        args.append(f"tuner.timeout_s={a.timeout_s}")
    start = time.monotonic()
    env = {**os.environ, "TQDM_DISABLE": "1"}
    logs = [out / f"worker-{w}.log" for w in range(a.workers)]  # a file each: a full pipe would stall a worker
    procs = [subprocess.Popen([*args, f"hydra.run.dir={out}/run-{w}"], cwd=ROOT, env=env, stdout=log.open("w"),
                              stderr=subprocess.STDOUT) for w, log in enumerate(logs)]
    codes = [p.wait() for p in procs]
    total = time.monotonic() - start
    for code, log in zip(codes, logs):
        if code != 0:
            print(log.read_text()[-3000:])
            return code
    storage = (f"sqlite:///{out}/optuna.db" if a.workers == 1 else
               optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(journal))))
    trials = optuna.load_study(study_name="scale", storage=storage).get_trials()
    walls = [t.duration.total_seconds() for t in trials if t.duration is not None]
    states = {s.name: sum(t.state is s for t in trials) for s in optuna.trial.TrialState}
    search = (max(t.datetime_complete for t in trials if t.datetime_complete)
              - min(t.datetime_start for t in trials)).total_seconds()
    print(f"profile: {profile.label} ({profile_path}); {a.workers} worker(s)")
    print(f"{len(trials)} trials ({', '.join(f'{k.lower()} {v}' for k, v in states.items() if v)}); "
          f"search {search:.0f} s; per trial median {statistics.median(walls):.1f} s, "
          f"p90 {statistics.quantiles(walls, n=10)[-1]:.1f} s, max {max(walls):.1f} s; "
          f"whole command {total:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
