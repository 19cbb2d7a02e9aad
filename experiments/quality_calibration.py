"""Calibrate the quality guardrail on a real model (SmolLM2-135M-Instruct), and compare execution paths.

Part 1 (the guardrail): the built-in probe set under the neutral reference and under each numerics knob
(qk_clip at several values, an fp8 e4m3 KV cache, sampler_half_topk); per candidate its token agreement,
mean KL, task score, sampling TV and the verdict with the default thresholds, plus the task answers it
changed. Part 2 (`--paths`, CUDA only): on 32 real prompts x 64 greedy tokens, the Triton path against the
torch path and CUDA graphs against eager: greedy agreement and first-token KL.

    python -m experiments.quality_calibration [--device cpu --dtype float32] [--paths] [--record]
"""

from __future__ import annotations

import argparse
import time

import torch

from experiments.record import add_record_args, emit
from runtime import EngineConfig, WeightCache, load_tokenizer
from tuner.config import QualityConfig
from tuner.executors.probes import TASKS, TEXTS
from tuner.executors.quality import compare, run_probe

KNOBS = [("qk_clip=32", {"qk_clip": 32.0}), ("qk_clip=16", {"qk_clip": 16.0}), ("qk_clip=8", {"qk_clip": 8.0}),
         ("qk_clip=4", {"qk_clip": 4.0}), ("qk_clip=2", {"qk_clip": 2.0}), ("qk_clip=1", {"qk_clip": 1.0}),
         ("qk_clip=0.1", {"qk_clip": 0.1}), ("kv fp8_e4m3", {"kv_cache_dtype": "fp8_e4m3"}),
         ("sampler_half_topk", {"sampler_half_topk": True})]


def config(args, **knobs) -> EngineConfig:
    mem = {"device_memory_gb": 1.0} if args.device == "cpu" else {"gpu_memory_utilization": 0.3}
    knobs.setdefault("cuda_graphs", False)  # the guardrail compares numerics; capture costs each engine seconds
    return EngineConfig.from_flat("smollm2-135m", device=args.device, dtype=args.dtype, max_model_len=1024,
                                  **mem, **knobs)


def guardrail(args, model, tokenizer) -> list[list[str]]:
    cfg = QualityConfig()
    reference = run_probe(config(args), model, cfg, tokenizer)
    n_right = sum(bool(c) for c in reference.correct)
    rows = [["reference (neutral)", "1.000", "0", f"{n_right}/{len(TASKS)} right", "0", "pass"]]
    for name, knobs in KNOBS:
        cand = run_probe(config(args, **knobs), model, cfg, tokenizer)
        q = compare(reference, cand)
        lost = [TASKS[i][0] for i, (r, c) in enumerate(zip(reference.correct, cand.correct)) if r and not c]
        verdict = "FAIL: " + q.describe(cfg).split("past the threshold: ")[1].rstrip(")") if q.violation(cfg) > 0 \
            else "pass"
        rows.append([name, f"{q.token_agreement:.3f}", f"{q.mean_kl:.4f}", f"{q.task_score:.2f}" + (
            _lost(lost)), f"{q.sampling_tv:.4f}", verdict])
    return rows


def _lost(lost: list[str]) -> str:
    if not lost:
        return ""
    return f" (lost: {'; '.join(lost)})" if len(lost) <= 3 else f" (lost all {len(lost)})" if len(lost) == len(
        TASKS) else f" (lost {len(lost)}: {'; '.join(lost[:3])}; ...)"


def paths(args, tokenizer) -> list[list[str]]:
    """Triton vs torch attention, and graphs vs eager, on 32 real prompts x 64 greedy tokens."""
    cfg = QualityConfig(probe_size=32, probe_max_tokens=64)
    prompts = [q for q, _ in TASKS] + list(TEXTS)
    assert len(prompts) >= 27
    pairs = [("triton vs torch (eager)", {"attention_backend": "torch", "cuda_graphs": False},
              {"attention_backend": "triton", "cuda_graphs": False}),
             ("graphs vs eager (triton)", {"attention_backend": "triton", "cuda_graphs": False},
              {"attention_backend": "triton", "cuda_graphs": True})]
    weights = WeightCache()
    rows = []
    for name, ref_knobs, cand_knobs in pairs:
        ref_cfg, cand_cfg = config(args, **ref_knobs), config(args, **cand_knobs)
        model = weights.get(ref_cfg)[0]
        ref = run_probe(ref_cfg, model, cfg, tokenizer)
        cand = run_probe(cand_cfg, model, cfg, tokenizer)
        q = compare(ref, cand)
        first_kl = sum(float((p[0].exp() * (p[0] - c[0])).sum()) for p, c in zip(ref.logprobs, cand.logprobs))
        rows.append([name, f"{q.token_agreement:.3f}", f"{first_kl / len(ref.logprobs):.2e}",
                     f"{q.mean_kl:.2e}", "n/a" if q.task_score is None else f"{q.task_score:.2f}"])
    return rows


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--paths", action="store_true", help="also compare Triton/torch and graphs/eager (CUDA)")
    add_record_args(parser)
    args = parser.parse_args()
    torch.manual_seed(0)
    start = time.perf_counter()
    tokenizer = load_tokenizer("smollm2-135m")
    model = WeightCache().get(config(args))[0]
    print(f"tokenizer and weights loaded in {time.perf_counter() - start:.1f} s", flush=True)
    out = [f"SmolLM2-135M-Instruct, {args.dtype} on {args.device}; thresholds: {QualityConfig()}",
           table(["candidate", "token agreement", "mean KL", "task score", "sampling TV", "verdict"],
                 guardrail(args, model, tokenizer))]
    print(out[-1], flush=True)
    if args.paths:
        out.append(table(["paths (32 prompts x 64 tokens)", "greedy agreement", "first-token KL", "mean KL",
                          "task score"], paths(args, tokenizer)))
    out.append(f"wall {time.perf_counter() - start:.1f} s")
    emit("\n\n".join(out), args,
         f"Quality guardrail calibration on SmolLM2-135M-Instruct ({args.dtype}, {args.device})")


if __name__ == "__main__":
    main()
