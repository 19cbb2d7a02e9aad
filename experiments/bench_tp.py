"""Two GPUs, two shapes: one engine split over both (TP 2) against two replicas of one GPU each (TP 1 x 2), offline
throughput on the same requests, pagetune's runtime and vLLM in the same call (issue 33).

Each (engine, shape) runs in processes of its own, one after the other, alone on the GPUs. TP 2: one engine, every
request submitted at once. TP 1 x 2: one engine per GPU (CUDA_VISIBLE_DEVICES), the requests dealt alternately,
each timed from its own start (pagetune's behind a barrier); the figure is all output tokens over the slower
replica's time (an ideal balancer: the offline split is even). A warm-up of short requests runs before each timed
run. Output tokens/s, every request generating exactly its output length (greedy, EOS ignored), random bf16 weights
(vLLM: load_format dummy on experiments/vllm_model_dir.py's folder).

    python experiments/bench_tp.py --model llama-3-8b --workloads uniform,mixed --engines pagetune,vllm --out DIR
    python experiments/bench_tp.py --model tiny --workloads uniform --engines pagetune --requests 8   # CPU smoke run
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import time
from pathlib import Path

from bench_vs_vllm import prompts, workload

SHAPES = ("tp2", "tp1x2")


def _pagetune(model: str, device: str, tp: int, ids: list[list[int]], outs: list[int]) -> float:
    from runtime import LLM, SamplingParams

    knobs = {"tensor_parallel_size": tp} if tp > 1 else {}
    llm = LLM(model, device=device, max_model_len=None if model == "tiny" else 8192, **knobs)
    params = [SamplingParams(max_tokens=o, temperature=0.0, ignore_eos=True) for o in outs]
    llm.generate(prompt_token_ids=[p[:64] for p in ids[:8]], sampling_params=SamplingParams(max_tokens=8),
                 use_tqdm=False)
    start = time.perf_counter()
    llm.generate(prompt_token_ids=ids, sampling_params=params, use_tqdm=False)
    return time.perf_counter() - start


def _vllm(model_dir: str, tp: int, ids: list[list[int]], outs: list[int]) -> float:
    from vllm import LLM, SamplingParams, TokensPrompt

    llm = LLM(model=model_dir, tensor_parallel_size=tp, load_format="dummy", skip_tokenizer_init=True,
              max_model_len=8192)
    params = [SamplingParams(max_tokens=o, temperature=0.0, ignore_eos=True, detokenize=False) for o in outs]
    llm.generate([TokensPrompt(prompt_token_ids=p[:64]) for p in ids[:8]], SamplingParams(max_tokens=8),
                 use_tqdm=False)
    start = time.perf_counter()
    llm.generate([TokensPrompt(prompt_token_ids=p) for p in ids], params, use_tqdm=False)
    return time.perf_counter() - start


def _replica(engine: str, args: argparse.Namespace, gpu: int, ids, outs, barrier, result) -> None:
    os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    try:
        if engine == "vllm":  # no barrier: vLLM's start takes minutes, its timed run starts once it is ready
            result.put(_vllm(str(args.vllm_model_dir), 1, ids, outs))
            return
        barrier.wait(timeout=1800)
        result.put(_pagetune(args.model, "cpu" if args.model == "tiny" else "cuda", 1, ids, outs))
    except BaseException as e:
        result.put(f"replica {gpu} failed: {e!r}")
        raise


def run(engine: str, shape: str, args: argparse.Namespace, ids: list[list[int]], outs: list[int]) -> float:
    """Seconds to generate every request on `shape` (the slower replica's, for TP 1 x 2)."""
    if shape == "tp2":
        if engine == "vllm":
            return _vllm(str(args.vllm_model_dir), 2, ids, outs)
        return _pagetune(args.model, "cpu" if args.model == "tiny" else "cuda", 2, ids, outs)
    ctx = multiprocessing.get_context("spawn")
    barrier, result = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_replica, args=(engine, args, g, ids[g::2], outs[g::2], barrier, result))
             for g in range(2)]
    for p in procs:
        p.start()
    seconds = [result.get(timeout=3600) for _ in procs]
    for p in procs:
        p.join()
    failed = [s for s in seconds if isinstance(s, str)]
    if failed:
        raise SystemExit("; ".join(failed))
    return max(seconds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama-3-8b")
    ap.add_argument("--workloads", default="uniform,mixed")
    ap.add_argument("--engines", default="pagetune,vllm")
    ap.add_argument("--requests", type=int, default=None, help="the first N of each workload (smoke runs)")
    ap.add_argument("--vllm-model-dir", type=Path, default=Path("/tmp/vllm-llama-3-8b"))
    ap.add_argument("--out", type=Path, default=Path("bench-tp"))
    ap.add_argument("--child", nargs=3, default=None, help=argparse.SUPPRESS)  # engine shape workload
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.child:
        engine, shape, name = args.child
        w = workload(name, None)
        n = args.requests or len(w.prompt_lens)
        vocab = 2048 if args.model == "tiny" else 128256
        ids, outs = prompts(w.prompt_lens[:n], vocab, seed=1), w.output_lens[:n]
        seconds = run(engine, shape, args, ids, outs)
        figure = {"engine": engine, "shape": shape, "workload": name, "requests": n, "seconds": seconds,
                  "output_tok_s": sum(outs) / seconds}
        (args.out / f"{engine}-{shape}-{name}.json").write_text(json.dumps(figure))
        print(json.dumps(figure), flush=True)
        return
    import subprocess
    import sys

    for name in args.workloads.split(","):
        for engine in args.engines.split(","):
            for shape in SHAPES:
                cmd = [sys.executable, __file__, *sys.argv[1:], "--child", engine, shape, name]
                code = subprocess.call(cmd, env={**os.environ, "PYTHONUNBUFFERED": "1"})
                if code:
                    print(f"!! {engine} {shape} {name} exited with code {code}", flush=True)


if __name__ == "__main__":
    main()
