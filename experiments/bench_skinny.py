"""The skinny Triton GEMM against cuBLAS on a GPU: per weight shape and row bucket, and on a whole decode step.

    python -m experiments.bench_skinny [--models qwen2-7b llama-3-8b] [--out DIR]

Part 1, for each model: its projections (random bf16 weights of the model's shapes, every layer) through
`runtime.skinny.pick_skinny`, the timing an engine runs at start: per shape and row bucket, cuBLAS's pass over
the layers and the fastest candidate's, both as microseconds and as the weight bytes read per second.

Part 2, the first model: an engine with `skinny_gemm` off, then one with it on (its own picks), each decoding
`--seqs` sequences of a `--prompt-len`-token prompt, CUDA graphs as served; ms per decode step is
(time of 1 + `--tokens` tokens - time of 1 token) / `--tokens`, the best of three.
"""

from __future__ import annotations

import argparse
import gc
import time
from pathlib import Path

import torch

from runtime import LLM, SamplingParams
from runtime.model.llama import LlamaForCausalLM
from runtime.model.presets import preset_config
from runtime.skinny import ShapeTiming, pick_skinny


def shape_table(model_name: str) -> list[ShapeTiming]:
    torch.set_default_device("cuda")
    torch.set_default_dtype(torch.bfloat16)
    try:
        model = LlamaForCausalLM(preset_config(model_name))
    finally:
        torch.set_default_device(None)
        torch.set_default_dtype(torch.float32)
    timings = pick_skinny(model)
    del model
    torch.cuda.empty_cache()
    return timings


def markdown(model_name: str, timings: list[ShapeTiming]) -> str:
    lines = [f"{model_name}, {torch.cuda.get_device_name()}, torch {torch.__version__}",
             "", "| weight N x K | layers | rows | cuBLAS us | GB/s | best skinny | us | GB/s | skinny / cuBLAS | "
             "picked |", "|---|---|---|---|---|---|---|---|---|---|"]
    for t in timings:
        gb = t.out_features * t.in_features * 2 * t.layers / 1e9
        lines.append(f"| {t.out_features} x {t.in_features} | {t.layers} | {t.rows} | {t.cublas_us:.1f} | "
                     f"{gb / t.cublas_us * 1e6:.0f} | {tuple(t.best)} | {t.best_us:.1f} | {gb / t.best_us * 1e6:.0f} | "
                     f"{t.best_us / t.cublas_us:.3f} | {'yes' if t.picked else 'no'} |")
    return "\n".join(lines)


def decode_ms(model_name: str, skinny: bool, seqs: int, prompt_len: int, tokens: int) -> float:
    ms = _decode_ms(LLM(model=model_name, skinny_gemm=skinny, max_model_len=prompt_len + tokens + 8), seqs,
                    prompt_len, tokens)
    gc.collect()  # the engine's memory back before the next one sizes its pool
    torch.cuda.empty_cache()
    return ms


def _decode_ms(llm: LLM, seqs: int, prompt_len: int, tokens: int) -> float:
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(4, 30000, (prompt_len,), generator=gen).tolist() for _ in range(seqs)]

    def timed(n: int) -> float:
        params = SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)
        start = time.perf_counter()
        llm.generate(prompts, params, use_tqdm=False)
        return time.perf_counter() - start

    timed(tokens + 1)  # warm
    return min((timed(tokens + 1) - timed(1)) / tokens for _ in range(3)) * 1000.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["qwen2-7b", "llama-3-8b"])
    ap.add_argument("--seqs", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--prompt-len", type=int, default=1000)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    parts = [markdown(m, shape_table(m)) for m in args.models]
    for part in parts:
        print(part + "\n", flush=True)
    rows = ["| model | sequences | cuBLAS ms / step | skinny ms / step | ratio |", "|---|---|---|---|---|"]
    for seqs in args.seqs:
        off = decode_ms(args.models[0], False, seqs, args.prompt_len, args.tokens)
        on = decode_ms(args.models[0], True, seqs, args.prompt_len, args.tokens)
        rows.append(f"| {args.models[0]} | {seqs} | {off:.3f} | {on:.3f} | {on / off:.3f} |")
        print(rows[-1], flush=True)
    parts.append("\n".join(rows))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "bench-skinny.md").write_text("\n\n".join(parts) + "\n")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
