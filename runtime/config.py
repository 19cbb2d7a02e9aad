"""Frozen, validated configuration of the runtime.

One dataclass per concern (model, cache, scheduler, kernels), composed by `EngineConfig`. Every
field is validated in `__post_init__` with a message that names its dotted key, so a bad YAML value
or a bad `LLM(...)` keyword is caught where it is written. Field names follow vLLM where vLLM has
the knob. Nothing mutates a config after it is built: resolved copies are made with `replace`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, get_type_hints

import yaml

from runtime.typed import build, closest

KV_CACHE_DTYPES = ("auto", "float32", "bfloat16", "float16", "fp8_e4m3")
MODEL_DTYPES = ("auto", "float32", "bfloat16", "float16")


class ConfigError(ValueError):
    """A configuration value or key is wrong; the message names the dotted key."""


def _check(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise ConfigError(f"{key}: {message}")


# Field metadata key: the value under which a field leaves the model's numerics unchanged. Fields that
# carry it change numerics otherwise (the tuner's quality guardrail checks them against that value).
NEUTRAL = "numerics_neutral"
# The per-step token budget with chunked prefill when `scheduler.max_num_batched_tokens` is null (vLLM's
# `vllm serve` default for GPUs under 70 GiB; without chunked prefill the budget is max_model_len).
DEFAULT_CHUNKED_BUDGET = 2048
PREFILL_KERNELS = ("triton", "fa4")  # `kernel.prefill_kernel`


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


@dataclass(frozen=True)
class BlockTier:
    """Requests whose prompt + max_tokens is at most `max_len` use blocks of `block_size` tokens."""

    max_len: int
    block_size: int
    share: float  # fraction of the KV memory this tier owns

    def validate(self, key: str) -> None:
        _check(isinstance(self.max_len, int) and self.max_len > 0, f"{key}.max_len", "must be a positive int")
        _check(_is_pow2(self.block_size) and self.block_size <= 256, f"{key}.block_size",
               f"must be a power of two in [1, 256], got {self.block_size}")
        _check(0.0 < self.share <= 1.0, f"{key}.share", f"must be in (0, 1], got {self.share}")


@dataclass(frozen=True)
class ModelConfig:
    name: str = "tiny"  # a preset (runtime.model.presets: random-weight shapes, smollm2-135m), a .gguf file,
    #                     or a local Hugging Face folder
    dtype: str = "auto"  # auto: bfloat16 on CUDA, float32 on CPU
    seed: int = 0  # seed of a preset's random weights

    def __post_init__(self) -> None:
        _check(bool(self.name), "model.name", "must not be empty")
        _check(self.dtype in MODEL_DTYPES, "model.dtype", f"must be one of {MODEL_DTYPES}, got {self.dtype!r}")


@dataclass(frozen=True)
class CacheConfig:
    block_size: int = 16  # tokens per KV block (the single-tier case)
    block_tiers: tuple[BlockTier, ...] = ()  # empty: one tier of `block_size` covering max_model_len
    gpu_memory_utilization: float = 0.9  # share of device memory the engine may use
    device_memory_gb: float | None = None  # memory to plan with; None: CUDA's total, or half a NUMA node's RAM on CPU
    swap_space: float = 0.0  # GiB of CPU memory for swapped-out KV blocks (preemption_mode=swap)
    kv_cache_dtype: str = field(default="auto", metadata={NEUTRAL: "auto"})  # auto: the model dtype
    enable_prefix_caching: bool = True
    watermark: float = 0.01  # share of blocks kept free when admitting new requests
    num_gpu_blocks_override: int | None = None  # fix the pool size in blocks (tests, debugging)

    def __post_init__(self) -> None:
        _check(_is_pow2(self.block_size) and self.block_size <= 256, "cache.block_size",
               f"must be a power of two in [1, 256], got {self.block_size}")
        _check(0.0 < self.gpu_memory_utilization <= 1.0, "cache.gpu_memory_utilization",
               f"must be in (0, 1], got {self.gpu_memory_utilization}")
        # Finite: the memory plan turns GiB into an int of bytes (int(inf) raises at engine start).
        _check(self.device_memory_gb is None or 0 < self.device_memory_gb < math.inf, "cache.device_memory_gb",
               f"must be positive and finite, got {self.device_memory_gb}")
        _check(0 <= self.swap_space < math.inf, "cache.swap_space",
               f"must be >= 0 GiB and finite, got {self.swap_space}")
        _check(self.kv_cache_dtype in KV_CACHE_DTYPES, "cache.kv_cache_dtype",
               f"must be one of {KV_CACHE_DTYPES}, got {self.kv_cache_dtype!r}")
        _check(0.0 <= self.watermark < 0.5, "cache.watermark", f"must be in [0, 0.5), got {self.watermark}")
        _check(self.num_gpu_blocks_override is None or self.num_gpu_blocks_override > 0,
               "cache.num_gpu_blocks_override", "must be a positive number of blocks")
        self._validate_tiers()

    def _validate_tiers(self) -> None:
        for i, tier in enumerate(self.block_tiers):
            tier.validate(f"cache.block_tiers[{i}]")
        lens = [t.max_len for t in self.block_tiers]
        _check(lens == sorted(set(lens)), "cache.block_tiers", f"max_len must strictly increase, got {lens}")
        total = sum(t.share for t in self.block_tiers)
        _check(not self.block_tiers or abs(total - 1.0) < 1e-6, "cache.block_tiers",
               f"shares must sum to 1, got {total:.4g}")

    def tiers(self, max_model_len: int) -> tuple[BlockTier, ...]:
        """The effective tiers for an engine of `max_model_len`.

        Without tiers: one tier of `block_size`. With tiers: the first tier whose max_len reaches
        max_model_len becomes the last and ends there; tiers past it would never be used, so they are
        dropped and the shares of the kept ones are scaled back up to 1.
        """
        if not self.block_tiers:
            return (BlockTier(max_len=max_model_len, block_size=self.block_size, share=1.0),)
        kept = [t for t in self.block_tiers if t.max_len < max_model_len]
        last = self.block_tiers[len(kept)] if len(kept) < len(self.block_tiers) else self.block_tiers[-1]
        kept = [t for t in kept if t is not last] + [replace(last, max_len=max_model_len)]
        total = sum(t.share for t in kept)
        return tuple(replace(t, share=t.share / total) for t in kept)


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_seqs: int = 256  # running requests at most
    max_num_batched_tokens: int | None = None  # token budget per step; None: DEFAULT_CHUNKED_BUDGET chunked,
    #                                            else max_model_len
    enable_chunked_prefill: bool = True
    max_model_len: int | None = None  # None: the model's max_position_embeddings
    preemption_mode: str = "recompute"  # recompute | swap
    policy: str = "fcfs"  # fcfs | priority (lower priority value runs first)
    # vLLM's name: the host schedules and builds step N+1 while the device runs step N; decode inputs come from
    # step N's sampled tokens on the device, and stops are seen one step late (the extra token is dropped).
    # Outputs equal the synchronous engine's. None: on where it pays, an engine on one CUDA device (on an H200 a
    # decode step 7-16% shorter, the GPU idle 0.5-1.5% of the time instead of 4-10%: experiments/RESULTS.md),
    # off elsewhere (a CPU computes as it launches: there is nothing to hide). A simulated engine steps
    # synchronously whatever this says (its step-time model is the synchronous runtime's), and so does an
    # engine whose steps are logged for the simulator (`runtime.StepLog`: `EngineConfig.synchronous`).
    async_scheduling: bool | None = None

    def __post_init__(self) -> None:
        _check(self.max_num_seqs >= 1, "scheduler.max_num_seqs", f"must be >= 1, got {self.max_num_seqs}")
        _check(self.max_num_batched_tokens is None or self.max_num_batched_tokens >= 1,
               "scheduler.max_num_batched_tokens", f"must be >= 1, got {self.max_num_batched_tokens}")
        _check(self.max_model_len is None or self.max_model_len >= 1, "scheduler.max_model_len",
               f"must be >= 1, got {self.max_model_len}")
        _check(self.preemption_mode in ("recompute", "swap"), "scheduler.preemption_mode",
               f"must be 'recompute' or 'swap', got {self.preemption_mode!r}")
        _check(self.policy in ("fcfs", "priority"), "scheduler.policy",
               f"must be 'fcfs' or 'priority', got {self.policy!r}")


@dataclass(frozen=True)
class KernelConfig:
    attention_backend: str = "auto"  # auto: triton on CUDA, torch elsewhere | torch | triton
    # prefill chunks shorter than this use torch SDPA on their gathered K/V instead of the flash kernel; 1: none
    # do (on an H200 flash took a 2-63-token chunk's step 2.6-14x faster: experiments/bench_prefill_paths.py)
    flash_min_len: int = 1
    split_kv_min_len: int = 256  # decode contexts longer than this use split-KV (fastest or level at any batch)
    # the flash path's prefill kernel with Triton attention: triton (this project's) or fa4 (FlashAttention 4's
    # CuTe-DSL kernels, an optional install: kernels/fa4_prefill.py; Hopper or Blackwell, bf16/fp16 cache, no
    # qk_clip; the engine refuses it at start where it cannot run, saying why)
    prefill_kernel: str = "triton"
    # clamp scaled QK scores to [-qk_clip, qk_clip] before softmax; None: no clamp
    qk_clip: float | None = field(default=None, metadata={NEUTRAL: None})
    # pad token count and decode batch size up to a multiple of this; under CUDA graphs a step of up to
    # max_cudagraph_capture_size tokens is padded to its graph bucket instead (pad_multiple acts past it)
    pad_multiple: int = 1
    # CUDA graphs: decode-only steps of a one-tier engine whole, other steps in pieces (see the next field);
    # None: wherever they can run (CUDA, Triton attention), as vLLM captures unless told `--enforce-eager`;
    # false: none (eager)
    cuda_graphs: bool | None = None
    # steps of up to this many tokens (any mix of prefill and decode, any tiers) replay piecewise graphs: the
    # model captured between attentions, which run eagerly (runtime/piecewise.py); 0: none. Decode-only steps
    # of a one-tier engine replay full graphs instead. vLLM's name; its default is 512, where torch.compile's
    # code runs the larger steps. Here 2048, the default token budget: every step of a default engine replays a
    # graph (an eager step's launches can outlast its kernels: experiments/RESULTS.md).
    max_cudagraph_capture_size: int = 2048
    # steps of at most 16 rows (decodes of few sequences) may run each projection as the skinny Triton GEMM where,
    # timed against cuBLAS on this GPU when the engine starts, it was faster (runtime/skinny.py); CUDA with Triton
    # attention only, inert elsewhere; false: cuBLAS always
    skinny_gemm: bool = True
    # top-k rows: select the k in fp16, softmax in fp32 over them, batched
    sampler_half_topk: bool = field(default=False, metadata={NEUTRAL: False})

    def __post_init__(self) -> None:
        _check(self.attention_backend in ("auto", "torch", "triton"), "kernel.attention_backend",
               f"must be auto, torch or triton, got {self.attention_backend!r}")
        _check(self.flash_min_len >= 1, "kernel.flash_min_len", f"must be >= 1, got {self.flash_min_len}")
        _check(self.split_kv_min_len >= 1, "kernel.split_kv_min_len", f"must be >= 1, got {self.split_kv_min_len}")
        _check(self.prefill_kernel in PREFILL_KERNELS, "kernel.prefill_kernel",
               f"must be {' or '.join(PREFILL_KERNELS)}, got {self.prefill_kernel!r}")
        _check(self.qk_clip is None or self.qk_clip > 0, "kernel.qk_clip", f"must be > 0 or null, got {self.qk_clip}")
        _check(self.pad_multiple >= 1, "kernel.pad_multiple", f"must be >= 1, got {self.pad_multiple}")
        _check(0 <= self.max_cudagraph_capture_size <= 8192, "kernel.max_cudagraph_capture_size",
               f"must be in [0, 8192], got {self.max_cudagraph_capture_size}")


@dataclass(frozen=True)
class EngineConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    kernel: KernelConfig = field(default_factory=KernelConfig)
    device: str = "auto"  # auto: cuda when available, else cpu
    # ranks (one process and device each) the model is split over, by attention head, MLP column and vocabulary
    # (runtime.distributed); must divide the model's query and KV heads (checked by `engine_limits`). vLLM's name.
    tensor_parallel_size: int = 1
    seed: int = 0  # seed of sampling for requests that set none
    debug_integrity: bool = False  # run the block-table integrity check after every step
    metadata: dict[str, Any] | None = None  # provenance of an exported config (study, trial, ...); not used

    def __post_init__(self) -> None:
        _check(re.fullmatch(r"auto|cpu|cuda(:\d+)?", self.device) is not None, "device",
               f"must be auto, cpu or cuda[:N], got {self.device!r}")
        _check(self.tensor_parallel_size >= 1, "tensor_parallel_size",
               f"must be >= 1, got {self.tensor_parallel_size}")
        _check(not (self.scheduler.async_scheduling is True and self.tensor_parallel_size > 1),
               "scheduler.async_scheduling",
               "is not supported with tensor_parallel_size > 1 (the other ranks take each step's tokens from the host)")
        _check(not (self.kernel.cuda_graphs and self.cache.block_tiers), "kernel.cuda_graphs",
               "decode graphs support one block-size tier: set it to null or false with cache.block_tiers")
        _check(self.device != "cpu" or not self.kernel.cuda_graphs, "kernel.cuda_graphs",
               "needs a CUDA device (device is cpu): set it to null or false")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> EngineConfig:
        """Build from nested sections ({cache: {block_size: 16}, ...}); unknown keys are errors."""
        return _build(cls, data, prefix="")

    @classmethod
    def from_yaml(cls, path: str | Path) -> EngineConfig:
        """Load a runtime YAML (a `best.yaml` too: its `runtime:` section is used, metadata ignored)."""
        data = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(data, Mapping):
            raise ConfigError(f"{path}: expected a mapping at the top level")
        return cls.from_mapping(data.get("runtime", data))

    @classmethod
    def from_flat(cls, model: str, **knobs: Any) -> EngineConfig:
        """Build from vLLM-style flat keywords (`block_size=16, max_num_seqs=64`)."""
        nested: dict[str, dict[str, Any]] = {"model": {"name": model}}
        for key, value in knobs.items():
            section = FLAT_KEYS.get(key)
            if section is None:
                raise ConfigError(f"unknown engine argument {key!r}{closest(key, FLAT_KEYS)}")
            if section == "":
                nested[key] = value  # type: ignore[assignment]
            else:
                nested.setdefault(section, {})[key] = value
        return cls.from_mapping(nested)

    def to_dict(self) -> dict[str, Any]:
        """Nested plain dict (YAML-ready); `from_mapping(to_dict())` round-trips."""
        return _to_plain(self)

    @property
    def changes_numerics(self) -> bool:
        """Whether a numerics-changing field (`NUMERICS_NEUTRAL`) is off its neutral value."""
        return self != self.numerics_neutral()

    def numerics_neutral(self) -> EngineConfig:
        """This config with every numerics-changing field at its neutral value (the guardrail's reference)."""
        sections = {}
        for path, neutral in NUMERICS_NEUTRAL.items():
            section, name = path.split(".")
            sections.setdefault(section, {})[name] = neutral
        return replace(self, **{s: replace(getattr(self, s), **v) for s, v in sections.items()})

    def synchronous(self) -> EngineConfig:
        """This config stepped synchronously (async scheduling off): what `runtime.StepLog` times."""
        return replace(self, scheduler=replace(self.scheduler, async_scheduling=False))

    def inert_fields(self, device_type: str) -> frozenset[str]:
        """Dotted fields that cannot change anything on a `device_type` ("cuda", "cpu") engine."""
        inert = set()
        if device_type != "cuda":
            inert |= {"kernel.cuda_graphs", "kernel.max_cudagraph_capture_size"}
        torch_attention = self.kernel.attention_backend == "torch" or (
            self.kernel.attention_backend == "auto" and device_type != "cuda")
        if torch_attention:  # the Triton kernels' thresholds
            inert |= {"kernel.flash_min_len", "kernel.split_kv_min_len", "kernel.prefill_kernel"}
        if torch_attention or device_type != "cuda":  # picked by timing on a CUDA device with Triton attention only
            inert.add("kernel.skinny_gemm")
        return frozenset(inert)


def _build(cls: type, data: Mapping[str, Any], prefix: str) -> Any:
    return build(cls, data, ConfigError, prefix)


def _to_plain(obj: Any) -> Any:
    if is_dataclass(obj):
        return {f.name: _to_plain(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, tuple):
        return [_to_plain(v) for v in obj]
    return obj


def _flat_keys() -> dict[str, str]:
    keys: dict[str, str] = {}
    for section in ("cache", "scheduler", "kernel"):
        section_cls = get_type_hints(EngineConfig)[section]
        for f in fields(section_cls):
            assert f.name not in keys, f"flat engine argument {f.name} is ambiguous"
            keys[f.name] = section
    keys.update({"device": "", "tensor_parallel_size": "", "seed": "", "debug_integrity": "", "metadata": ""})
    keys.update({"dtype": "model"})
    return keys


def _numerics_neutral() -> dict[str, Any]:
    return {f"{section}.{f.name}": f.metadata[NEUTRAL]
            for section in ("cache", "scheduler", "kernel") for f in fields(get_type_hints(EngineConfig)[section])
            if NEUTRAL in f.metadata}


FLAT_KEYS = _flat_keys()  # vLLM-style flat argument -> section of EngineConfig ("" for top level)
NUMERICS_NEUTRAL = _numerics_neutral()  # dotted field -> its neutral value, for the fields that change numerics
