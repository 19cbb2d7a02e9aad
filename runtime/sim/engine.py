"""The simulated engine: the real `LLMEngine` loop, scheduler and KV manager on a virtual clock, no weights.

    LLMEngine.step:  schedule (real) -> SimRunner.execute: clock += predicted step and host time -> StreamSampler
                     (a deterministic token per row, never an EOS) -> postprocess (real)

The KV pool is sized by `runtime.memory.plan_memory`, the function the real engine uses, from the
profiled GPU's memory and the profile's weight and activation bytes, so a config holds the blocks it
would hold on that GPU. A step's host time (scheduling, outputs, the replay loop) is the profile's host
model, measured on the real engine by a refit (zero before one); under async scheduling (where the engine
on the profiled GPU would use it) the host prepares a step while the device runs the one before, so a
step takes the longer of the two rather than their sum. The scheduler itself steps in sync: a request
finishes one step earlier than under async scheduling. What the simulator leaves out: swap and
copy-on-write copies (free here), and numerics.
"""

from __future__ import annotations

from runtime.backend import Backend
from runtime.config import ConfigError, EngineConfig
from runtime.engine import LLMEngine
from runtime.kv.manager import KVCacheManager
from runtime.limits import EngineLimits, async_scheduling_on, decode_graphs_on, engine_limits, piecewise_graphs_on
from runtime.memory import GIB, MemoryPlan, plan_memory
from runtime.scheduler import SchedulerOutput
from runtime.sim.hostmodel import HostModel
from runtime.sim.parallel import ParallelStepModel, rank_kv_layout, rank_weight_bytes
from runtime.sim.profile_file import GpuProfile
from runtime.sim.shape import StepShaper
from runtime.sim.stepmodel import StepTimeModel

NO_HOST = HostModel()  # a profile before any refit
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "fp8_e4m3": 1}


class VirtualClock:
    """Simulated seconds: steps advance it, `jump_to` skips idle gaps (the replay clock's interface)."""

    def __init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        self.now = 0.0
        self.skipped_s = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def jump_to(self, t: float) -> None:
        if t > self.now:
            self.skipped_s += t - self.now
            self.now = t


class SimRunner:
    """Runs a step by advancing the clock by the step-time model's prediction for its composition and the
    host model's for its scheduled sequences: their sum, or the longer of the two when the host's work
    overlaps the device's (`overlapped`, async scheduling)."""

    def __init__(self, model: StepTimeModel | ParallelStepModel, shaper: StepShaper, clock: VirtualClock,
                 host: HostModel = NO_HOST, overlapped: bool = False) -> None:
        self.model, self.shaper, self.clock, self.host = model, shaper, clock, host
        self.overlapped = overlapped

    def execute(self, out: SchedulerOutput) -> SchedulerOutput:
        device_s = self.model.predict_tiers(self.shaper.parts(out.scheduled))
        host_s = self.host.predict(len(out.scheduled))
        self.clock.advance(max(device_s, host_s) if self.overlapped else device_s + host_s)
        return out


class StreamSampler:
    """One token per row: a fixed stream per sequence that skips `eos_ids`, so requests stop at max_tokens."""

    def __init__(self, vocab_size: int, eos_ids: frozenset[int]) -> None:
        self.vocab_size, self.eos_ids = vocab_size, eos_ids
        self.drawn: dict[int, int] = {}  # seq_id -> tokens drawn so far

    def sample(self, logits: object, rows: list[list[tuple[int, int, object]]]) -> list[list[int]]:
        return [[self._next(seq_id, seed) for seq_id, seed, _ in seqs] for seqs in rows]

    def _next(self, seq_id: int, seed: int) -> int:
        k = self.drawn[seq_id] = self.drawn.get(seq_id, 0) + 1
        token = (seed * 31 + k * 7919) % self.vocab_size
        while token in self.eos_ids:
            token = (token + 1) % self.vocab_size
        return token

    def forget(self, seq_id: int) -> None:
        self.drawn.pop(seq_id, None)


def sim_memory(config: EngineConfig, profile: GpuProfile) -> tuple[int, int, MemoryPlan]:
    """(max_model_len, token budget, memory plan) of `config` on the profiled GPU, as the real engine plans them."""
    limits, plan = _plan(config, profile)
    return limits.max_model_len, limits.max_num_batched_tokens, plan


def _plan(config: EngineConfig, profile: GpuProfile) -> tuple[EngineLimits, MemoryPlan]:
    if config.model.name != profile.model:
        raise ConfigError(f"model.name: the GPU profile is of {profile.model!r}, not {config.model.name!r}")
    limits = engine_limits(config, profile.info)
    kv_dtype = profile.dtype if config.cache.kv_cache_dtype == "auto" else config.cache.kv_cache_dtype
    device_bytes = (int(config.cache.device_memory_gb * GIB) if config.cache.device_memory_gb is not None
                    else profile.device.memory_bytes)
    degree = config.tensor_parallel_size  # per rank: its share of the weights and of the KV heads
    plan = plan_memory(
        device_bytes=device_bytes, utilization=config.cache.gpu_memory_utilization,
        weight_bytes=rank_weight_bytes(profile.weight_bytes, profile.info, degree),
        activation_bytes=profile.activation.bytes_for(limits.max_num_batched_tokens, config.scheduler.max_num_seqs),
        tiers=limits.tiers, layout=rank_kv_layout(profile.info, degree), kv_dtype_bytes=DTYPE_BYTES[kv_dtype],
        swap_space_gb=config.cache.swap_space, num_blocks_override=config.cache.num_gpu_blocks_override)
    return limits, plan


def sim_backend(config: EngineConfig, profile: GpuProfile, clock: VirtualClock,
                step_model: StepTimeModel | None = None) -> Backend:
    """A model-free backend for `config` on the profiled GPU (`step_model`: the profile's unless given;
    the host model is always the profile's)."""
    limits, plan = _plan(config, profile)
    tiers = plan.tier_specs(limits.tiers)
    eos: frozenset[int] = frozenset()  # a model-free stream never stops a request early: max_tokens does
    model: StepTimeModel | ParallelStepModel = step_model or profile.step_model
    degree = config.tensor_parallel_size
    if degree > 1:
        model = ParallelStepModel.of(model, degree, profile.allreduce_cost(degree), profile.info,
                                     DTYPE_BYTES[profile.dtype])
    # graphs as the engine would capture them on the profiled device (Triton attention there, unless asked for
    # torch); tensor-parallel ranks run eagerly, and in sync
    cuda_triton = profile.device.type == "cuda" and config.kernel.attention_backend != "torch"
    graphs = degree == 1 and decode_graphs_on(config.kernel, len(tiers), cuda_triton)
    piecewise = degree == 1 and piecewise_graphs_on(config.kernel, cuda_triton)
    overlapped = async_scheduling_on(config, profile.device.type)

    def make_runner(kv: KVCacheManager) -> SimRunner:
        return SimRunner(model, StepShaper(config, kv.tiers, graphs, piecewise), clock, profile.host_model,
                         overlapped)

    vocab = profile.info.vocab_size
    return Backend(limits.max_model_len, limits.max_num_batched_tokens, tiers, vocab, eos, make_runner,
                   StreamSampler(vocab, eos), None)


def sim_engine(config: EngineConfig, profile: GpuProfile, clock: VirtualClock,
               step_model: StepTimeModel | None = None) -> LLMEngine:
    """An engine whose steps take the profile's predicted time on `clock` (give the same clock to the replay)."""
    return LLMEngine(config, clock=clock, backend=sim_backend(config, profile, clock, step_model))
