"""End-to-end generation throughput on one GPU: pagetune `LLM.generate` against transformers.

The ANCHORS workloads (Llama-3-8B shape, random bf16 weights, greedy, EOS ignored, 256 requests,
token ids from torch.Generator().manual_seed(0)):
    uniform  every prompt 512 tokens, every output 256
    mixed    prompt lengths uniform in [64, 2048), output lengths uniform in [32, 512)
Peers, measured in the same run: transformers static `generate` in left-padded batches of 64 (run to
the batch's longest output; only each request's own tokens count as useful) and transformers
`generate_batch` (uniform only). Also: KV waste against the contiguous preallocation a static batch
needs, and the roofline fraction (prefill FLOPs at the measured GEMM rate + decode bytes at the
measured copy rate). Prints a markdown table; --record appends it to experiments/RESULTS.md.

    python -m experiments.bench_e2e --record
"""

from __future__ import annotations

import argparse
import gc
import time
from typing import Any

import torch

from experiments.e2e_peers import hf_generate_batch, hf_static, load_hf
from experiments.e2e_roofline import ceilings, roofline_seconds, static_kv_waste
from experiments.record import add_record_args, header, record
from runtime import LLM, SamplingParams
from runtime.model.presets import preset_config


def workload(name: str, n: int, vocab: int) -> tuple[list[list[int]], list[int]]:
    gen = torch.Generator().manual_seed(0)
    if name == "uniform":
        prompts = torch.randint(0, vocab, (n, 512), generator=gen).tolist()
        return prompts, [256] * n
    p_lens = torch.randint(64, 2048, (n,), generator=gen).tolist()
    o_lens = torch.randint(32, 512, (n,), generator=gen).tolist()
    return [torch.randint(0, vocab, (p,), generator=gen).tolist() for p in p_lens], o_lens


def warm_up_prompts(prompts: list[list[int]]) -> list[list[int]]:
    """Eight short prompts (generated for 8 tokens) run before a timed run: kernels compiled, graphs captured."""
    return [p[:64] for p in prompts[:8]]


def warmed_llm(model: str, prompts: list[list[int]], **knobs: Any) -> LLM:
    """The model's `LLM` after the warm-up prompts ran."""
    llm = LLM(model=model, **knobs)
    llm.generate(warm_up_prompts(prompts), SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True),
                 use_tqdm=False)
    return llm


def timed_generate(llm: LLM, prompts: list[list[int]], outs: list[int]) -> tuple[float, int]:
    """Seconds and output tokens of one `generate` of every prompt for its output length (greedy, EOS ignored)."""
    params = [SamplingParams(max_tokens=o, temperature=0.0, ignore_eos=True) for o in outs]
    sync()
    start = time.perf_counter()
    results = llm.generate(prompts, params, use_tqdm=False)
    sync()
    return time.perf_counter() - start, sum(len(r.outputs[0].token_ids) for r in results)


def free_device() -> None:
    """What a dropped engine held goes back before the next one plans its KV pool."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def sync() -> None:
    if torch.cuda.is_available():  # a CPU smoke run (--model tiny) has nothing to wait for
        torch.cuda.synchronize()


def run_pagetune(model: str, prompts, outs, **knobs: Any) -> dict[str, float]:
    llm = warmed_llm(model, prompts, **knobs)
    llm.engine.reset()
    seconds, tokens = timed_generate(llm, prompts, outs)
    waste = llm.engine.totals.kv_waste_mean
    del llm
    free_device()
    return {"seconds": seconds, "tokens": tokens, "tok_s": tokens / seconds, "kv_waste": waste}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="llama-3-8b")
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--workloads", default="uniform,mixed")
    parser.add_argument("--hf-batches", type=int, default=1, help="static batches of 64 timed per workload")
    parser.add_argument("--skip-hf", action="store_true")
    parser.add_argument("--max-num-batched-tokens", type=int, default=8192)
    add_record_args(parser)
    args = parser.parse_args()
    vocab = preset_config(args.model).vocab_size
    gemm, copy = ceilings()
    rows = []
    for name in args.workloads.split(","):
        prompts, outs = workload(name, args.requests, vocab)
        row: dict[str, Any] = {"workload": name, "requests": args.requests}
        if not args.skip_hf:
            hf = load_hf(args.model)
            row["hf_static_tok_s"] = hf_static(hf, prompts, outs, args.hf_batches)
            row["hf_batch_tok_s"] = hf_generate_batch(hf, prompts[:64], outs[:64]) if name == "uniform" else None
            del hf
            gc.collect()
            torch.cuda.empty_cache()
        knobs = dict(max_num_seqs=256, max_num_batched_tokens=args.max_num_batched_tokens, max_model_len=4096,
                     gpu_memory_utilization=0.9)
        eager = run_pagetune(args.model, prompts, outs, cuda_graphs=False, **knobs)
        graphs = run_pagetune(args.model, prompts, outs, cuda_graphs=True, **knobs)
        row |= {"pagetune_tok_s": eager["tok_s"], "pagetune_graphs_tok_s": graphs["tok_s"],
                "kv_waste": graphs["kv_waste"], "static_kv_waste": static_kv_waste(prompts, outs, 64)}
        best = max(eager["tok_s"], graphs["tok_s"])
        row["roofline_fraction"] = roofline_seconds(args.model, prompts, outs, gemm, copy) * best / sum(outs)
        rows.append(row)
        print(row, flush=True)
    table = render(rows, gemm, copy)
    print(table)
    if args.record:
        record(header(f"End-to-end generation vs transformers ({args.model} shape, random bf16 weights)")
               + "\n" + table + "\n", args.results)


def _fmt(v: Any, digits: int = 0) -> str:
    return "n/a" if v is None else f"{v:,.{digits}f}"


def render(rows: list[dict[str, Any]], gemm: float, copy: float) -> str:
    lines = [f"Ceilings measured in this run: bf16 GEMM {gemm / 1e12:.0f} TFLOP/s, device copy {copy / 1e12:.2f} TB/s.",
             "", "| workload | transformers static tok/s | generate_batch tok/s | pagetune eager tok/s | "
             "pagetune + CUDA graphs tok/s | x static | x generate_batch | KV waste pagetune | KV waste static | "
             "roofline fraction |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        best = max(r["pagetune_tok_s"], r["pagetune_graphs_tok_s"])
        vs_static = best / r["hf_static_tok_s"] if r.get("hf_static_tok_s") else None
        vs_batch = best / r["hf_batch_tok_s"] if r.get("hf_batch_tok_s") else None
        lines.append(f"| {r['workload']} | {_fmt(r.get('hf_static_tok_s'))} | {_fmt(r.get('hf_batch_tok_s'))} | "
                     f"{_fmt(r['pagetune_tok_s'])} | {_fmt(r['pagetune_graphs_tok_s'])} | {_fmt(vs_static, 2)} | "
                     f"{_fmt(vs_batch, 2)} | {r['kv_waste']:.1%} | {r['static_kv_waste']:.1%} | "
                     f"{r['roofline_fraction']:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
