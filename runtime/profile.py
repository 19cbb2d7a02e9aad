"""`python -m runtime.profile model=llama-3-8b out=profile.json`: profile a model on this GPU for the simulator.

    python -m runtime.profile model=llama-3-8b out=conf/profiles/h200-llama-3-8b.json     # ~5-8 min on an H200
    python -m runtime.profile model=tiny grid=small out=/tmp/tiny.json                    # seconds on a CPU

For each setting (block size, CUDA graphs off/on, KV dtype) one engine is built on the loaded weights and a
grid of step compositions is timed through its runner and sampler (`runtime.step_timing`). Each timed step
is a sample of the variant its path makes it (`runtime.sim.shape`): an eager engine's steps are eager; a
graphs engine times pure-decode steps (full graphs) and the other steps up to its capture size (piecewise
graphs), the larger ones being the eager engine's. The step-time model is fitted per variant
(`runtime.sim.stepmodel`), its error measured on every fifth step by a fit without them, and the
coefficients shipped are the fit on every step. An engine with two block tiers (graphs where they run, as
the defaults build it) then times steps that span both: what each took beyond that fit is a tier's cost
(`tier_s`, the mean). A burst
of requests through the first variant's engine then measures a step's host time (`runtime.sim.hostmodel`).
The forward's peak activation memory is measured at several token counts (estimated on CPU), and the
profile records the device, its memory, driver, CUDA, torch and Triton versions, the model's shape and
weight bytes.

Options (key=value): model (required), out, grid=small|full, device, dtype, block_sizes=8,16,32,128,
graphs=auto|on|off|both, kv_dtypes=auto,fp8_e4m3, max_model_len, max_num_seqs, max_num_batched_tokens,
memory_gb (the memory to plan the pool with), budget_s (stop timing past this), repeats, seed.
"""

from __future__ import annotations

import gc
import math
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from typing import NamedTuple

import torch

from runtime.config import ConfigError, EngineConfig, KernelConfig
from runtime.device import describe_device
from runtime.engine import LLMEngine
from runtime.limits import padded_tokens, piecewise_bucket, piecewise_buckets
from runtime.memory import GIB, estimate_activation_bytes
from runtime.model.info import model_info
from runtime.model.loader import load_model
from runtime.placement import resolve_device, resolve_dtype
from runtime.sampling_params import SamplingParams
from runtime.sim.hostmodel import HostModel, fit_host
from runtime.sim.profile_file import ActivationFit, DeviceRecord, GpuProfile, samples_table, save_profile
from runtime.sim.refit import host_points
from runtime.sim.stepmodel import StepSample, StepTimeModel, fit, fit_error, fit_tier_cost, split_held_back
from runtime.step_log import StepLog
from runtime.step_timing import Composition, StepTimer, TimedStep, grid, tier_grid


@dataclass(frozen=True)
class ProfileArgs:
    model: str
    out: str = "profile.json"
    grid: str = "full"  # small: a few dozen steps, one variant (tests, CPU checks) | full
    device: str = "auto"
    dtype: str = "auto"
    block_sizes: tuple[int, ...] = ()  # (): 16 for small, 16,32,128,8 for full (128: the TMA prefill path)
    graphs: str = "auto"  # auto: off and on where graphs run (CUDA), off elsewhere | on | off | both
    kv_dtypes: tuple[str, ...] = ()  # (): auto, plus fp8_e4m3 for a full grid on CUDA
    max_model_len: int | None = None  # None: 1024 small, min(8192, the model's) full
    max_num_seqs: int | None = None  # None: 16 small, 256 full
    max_num_batched_tokens: int | None = None  # None: 256 small, 8192 full
    memory_gb: float | None = None  # the device memory to plan the pool with (default: 1 GiB on CPU and for a small
    #                                 grid, the GPU's own for a full one); the profile records the device's total
    budget_s: float = 480.0  # stop timing new steps after this many seconds
    repeats: int = 3
    seed: int = 0

    def __post_init__(self) -> None:
        if self.grid not in ("small", "full"):
            raise ConfigError(f"grid: must be small or full, got {self.grid!r}")
        if self.graphs not in ("auto", "on", "off", "both"):
            raise ConfigError(f"graphs: must be auto, on, off or both, got {self.graphs!r}")

    @property
    def small(self) -> bool:
        return self.grid == "small"


def parse_args(argv: list[str]) -> ProfileArgs:
    """key=value arguments, typed by ProfileArgs' fields."""
    hints = {f.name: f.type for f in fields(ProfileArgs)}
    values: dict[str, object] = {}
    for arg in argv:
        key, sep, raw = arg.partition("=")
        if not sep or key not in hints:
            raise ConfigError(f"{arg!r}: expected key=value with key one of {', '.join(hints)}")
        kind = str(hints[key])
        if "tuple[int" in kind:
            values[key] = tuple(int(v) for v in raw.split(",") if v)
        elif "tuple[str" in kind:
            values[key] = tuple(v for v in raw.split(",") if v)
        elif kind.startswith("int"):
            values[key] = int(raw)
        elif kind.startswith("float"):
            values[key] = float(raw)
        else:
            values[key] = raw
    if "model" not in values:
        raise ConfigError("model: required, e.g. `python -m runtime.profile model=llama-3-8b out=profile.json`")
    return ProfileArgs(**values)  # type: ignore[arg-type]


class Setting(NamedTuple):
    """An engine the profile times steps on."""

    block_size: int
    kv_dtype: str = "auto"
    graphs: bool = False  # decode and piecewise graphs, or none (eager)

    @property
    def key(self) -> str:
        return f"bs{self.block_size}/{self.kv_dtype}/{'graphs' if self.graphs else 'eager'}"


def _settings(args: ProfileArgs, cuda: bool) -> list[Setting]:
    """The engines to time, most used first (a budget cut drops the tail)."""
    sizes = args.block_sizes or ((16,) if args.small else (16, 32, 128, 8))
    dtypes = args.kv_dtypes or (("auto", "fp8_e4m3") if cuda and not args.small else ("auto",))
    modes = {"auto": (False, True) if cuda else (False,), "on": (True,), "off": (False,), "both": (False, True)}
    return [Setting(bs, dt, g) for dt in dtypes for bs in sizes for g in modes[args.graphs]]


def _engine_config(args: ProfileArgs, setting: Setting, cuda: bool) -> EngineConfig:
    return EngineConfig.from_flat(args.model, **_knobs(args, setting, cuda))


def _knobs(args: ProfileArgs, setting: Setting, cuda: bool) -> dict:
    """The flat engine knobs a setting is timed with."""
    info = model_info(args.model)
    max_len = args.max_model_len or (1024 if args.small else min(8192, info.max_position_embeddings))
    knobs = dict(block_size=setting.block_size, kv_cache_dtype=setting.kv_dtype, cuda_graphs=setting.graphs,
                 max_model_len=max_len, max_num_seqs=args.max_num_seqs or (16 if args.small else 256),
                 max_num_batched_tokens=args.max_num_batched_tokens or (256 if args.small else 8192),
                 enable_prefix_caching=False, device=args.device, dtype=args.dtype)
    if not cuda or args.small or args.memory_gb:  # a small grid needs a small pool (a GPU's worth of a tiny
        knobs["device_memory_gb"] = args.memory_gb or 1.0  # model's blocks would take long to build)
    return knobs


def graph_engine_steps(comps: list[Composition], kernel: KernelConfig, piecewise: bool) -> list[Composition]:
    """What a graphs engine times of `comps`: pure-decode steps (full graphs) and, with `piecewise` graphs, the
    others up to the capture size (padded to `pad_multiple` as the inputs are); a larger step runs eagerly, as
    on the eager engine, which times it."""
    sizes = piecewise_buckets(kernel.max_cudagraph_capture_size) if piecewise else []
    return [c for c in comps
            if not c.chunks or piecewise_bucket(sizes, padded_tokens(c.batched_tokens, kernel.pad_multiple))]


def _time_setting(args: ProfileArgs, config: EngineConfig, model, deadline: float) -> list[StepSample]:
    def compositions(engine: LLMEngine) -> list[Composition]:
        s, kernel = config.scheduler, config.kernel
        comps = grid(args.small, engine.max_model_len, s.max_num_seqs, engine.scheduler.budget, args.seed)
        return graph_engine_steps(comps, kernel, engine.runner.piecewise is not None) if kernel.cuda_graphs \
            else comps

    return [StepSample(variant, shape, step.seconds)  # the variant of each step's path
            for step in _time_steps(args, config, model, compositions, deadline) for variant, shape in step.parts]


def _tier_cost(args: ProfileArgs, model, one_tier: StepTimeModel, cuda: bool, deadline: float) -> tuple[float, int]:
    """`tier_s` from steps over two tiers (block 16 up to a quarter of max_model_len, then block 16 again: only
    the second tier's own launches differ) against `one_tier`'s prediction: (seconds, steps timed). The engine
    has graphs where they run, as the defaults build it: its steps up to the capture size replay piecewise
    graphs, where a tier adds its attention's launches alone."""
    knobs = _knobs(args, Setting(16), cuda)
    knobs["cuda_graphs"] = None  # the default: piecewise graphs wherever graphs run (decode graphs need one tier)
    split = knobs["max_model_len"] // 4
    knobs["block_tiers"] = [{"max_len": split, "block_size": 16, "share": 0.5},
                            {"max_len": knobs["max_model_len"], "block_size": 16, "share": 0.5}]
    config = EngineConfig.from_flat(args.model, **knobs)

    def compositions(engine: LLMEngine) -> list[Composition]:
        return tier_grid(args.small, split, engine.max_model_len, config.scheduler.max_num_seqs,
                         engine.scheduler.budget)

    steps = _time_steps(args, config, model, compositions, deadline)
    if not any(len(step.parts) > 1 for step in steps):
        raise ConfigError("no step over two tiers could be timed")
    return fit_tier_cost(one_tier, steps), len(steps)


def _time_steps(args: ProfileArgs, config: EngineConfig, model,
                compositions: Callable[[LLMEngine], list[Composition]], deadline: float) -> list[TimedStep]:
    """Each composition that fits the pool, timed on a fresh engine of `config` until `deadline`; the engine and
    its pool go before the next is built."""
    engine = LLMEngine(config, model=model)
    timer = StepTimer(engine, args.repeats)
    steps: list[TimedStep] = []
    for c in compositions(engine):
        if time.monotonic() > deadline:
            break
        if timer.fits_pool(c):
            steps.append(timer.time_step(c))
    del timer, engine
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return steps


def _timed_tier_cost(args: ProfileArgs, model, one_tier: StepTimeModel, cuda: bool, start: float,
                     notes: list[str]) -> float:
    """`_tier_cost` within the budget, printed; 0.0 with a note when it was past the budget or failed."""
    if time.monotonic() - start > args.budget_s:
        notes.append(f"tiers: not timed, past budget_s {args.budget_s:g} (tier_s 0)")
        return 0.0
    try:
        tier_s, steps = _tier_cost(args, model, one_tier, cuda, start + args.budget_s)
    except Exception as e:  # the others' measurements count; the profile says what is missing
        notes.append(f"tiers: skipped ({str(e).splitlines()[0][:200]}; tier_s 0)")
        return 0.0
    notes.append(f"tier_s {tier_s * 1e3:.2f} ms: a tier past the first, from {steps} steps over two tiers")
    print(f"  {notes[-1]} ({time.monotonic() - start:.0f} s)", flush=True)
    return tier_s


def _activation_fit(config: EngineConfig, model, cuda: bool) -> ActivationFit:
    """Peak activation bytes at a few (tokens, seqs); a least-squares line through them."""
    points = [(256, 16), (1024, 256), (4096, 256), (4096, 16), (8192, 256)]
    elt = torch.empty((), dtype=next(model.parameters()).dtype).element_size()
    measured = []
    for tokens, seqs in points:
        if cuda:
            from runtime.activations import profile_activation_bytes

            peak = profile_activation_bytes(model, tokens, seqs, 8192, config.kernel, True)
        else:
            peak = estimate_activation_bytes(model.config, tokens, seqs, elt)
        measured.append((tokens, seqs, int(peak)))
    x = torch.tensor([[1.0, t, s] for t, s, _ in measured], dtype=torch.float64)
    y = torch.tensor([[float(b)] for *_, b in measured], dtype=torch.float64)
    c0, per_token, per_seq = torch.linalg.lstsq(x, y).solution.flatten().tolist()
    return ActivationFit(c0, per_token, per_seq, tuple(measured))


def _host_fit(args: ProfileArgs, config: EngineConfig, model) -> HostModel:
    """A step's host time (scheduling, outputs) on a burst of requests through the real engine: staggered
    lengths, so the steps schedule from many sequences down to one."""
    engine = LLMEngine(config.synchronous(), model=model)
    log = StepLog(engine)
    count, prompt = (16, 64) if args.small else (min(256, config.scheduler.max_num_seqs), 256)
    vocab = engine.vocab_size
    for i in range(count):
        params = SamplingParams(max_tokens=8 + i % 32 if args.small else 16 + i % 64, temperature=0.0,
                                ignore_eos=True)
        engine.add_request(f"host-{i}", [(i * 7919 + k) % vocab for k in range(prompt)], params)
    while engine.has_unfinished_requests():
        engine.step()
    del engine
    gc.collect()
    return fit_host(host_points(log.rows))


def _device_record(config: EngineConfig, memory_gb: float | None) -> DeviceRecord:
    info = describe_device(config)
    if info.type == "cuda":
        props = torch.cuda.get_device_properties(resolve_device(config.device))
        return DeviceRecord(info.name, "cuda", props.total_memory, info.torch_version, info.triton_version,
                            info.driver, _nvidia_driver())
    return DeviceRecord(info.name, "cpu", int((memory_gb or 1.0) * GIB), info.torch_version, info.triton_version)


def _nvidia_driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def run_profile(args: ProfileArgs, command: str = "") -> GpuProfile:
    start = time.monotonic()
    device = resolve_device(args.device)
    cuda = device.type == "cuda"
    if not cuda:
        torch.set_num_threads(1)  # tiny CPU steps: one thread times steadier than two contending
    dtype = resolve_dtype(args.dtype, device)
    model = load_model(args.model, dtype, device, 0)
    info = model_info(args.model)
    first = _engine_config(args, Setting(16), cuda)
    activation = _activation_fit(first, model, cuda)
    samples, notes = [], []
    for setting in _settings(args, cuda):
        if time.monotonic() - start > args.budget_s:
            notes.append(f"{setting.key}: not timed, past budget_s {args.budget_s:g}")
            continue
        try:
            got = _time_setting(args, _engine_config(args, setting, cuda), model, start + args.budget_s)
        except Exception as e:  # fp8 KV or graphs unsupported here (a Triton compile error too): the others count
            notes.append(f"{setting.key}: skipped ({str(e).splitlines()[0][:200]})")
            continue
        print(f"  {setting.key}: {len(got)} steps timed ({time.monotonic() - start:.0f} s)", flush=True)
        samples += got
    if not samples:
        raise ConfigError("no step could be timed: " + "; ".join(notes))
    one_tier = fit(samples)
    tier_s = _timed_tier_cost(args, model, one_tier, cuda, start, notes)
    host = _host_fit(args, first, model)
    print(f"  host time per step: {host.line()} ({time.monotonic() - start:.0f} s)", flush=True)
    fit_points, held = split_held_back(samples)
    error = fit_error(fit(fit_points), held)
    return GpuProfile(
        model=args.model, model_shape=info._asdict(), dtype=str(dtype).removeprefix("torch."),
        device=_device_record(first, args.memory_gb),
        weight_bytes=sum(p.numel() * p.element_size() for p in model.parameters()), activation=activation,
        coefficients=dict(one_tier.coefficients), held_back_error=tuple(error),  # type: ignore[arg-type]
        samples=samples_table(samples), grid=args.grid, measure_s=round(time.monotonic() - start, 1),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"), command=command, notes=tuple(notes),
        host=tuple(host), tier_s=tier_s)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = parse_args(argv)
        profile = run_profile(args, "python -m runtime.profile " + " ".join(argv))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    path = save_profile(profile, args.out)
    err = profile.fit_error
    print(f"profile of {profile.label}: {sum(len(v) for v in profile.samples.values())} steps, "
          f"{len(profile.coefficients)} variants in {profile.measure_s:g} s")
    print(f"fit: {err.line()}" if not math.isnan(err.median) else "fit: no held-back steps")
    for note in profile.notes:
        print(f"note: {note}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
