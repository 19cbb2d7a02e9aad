"""Which `split_kv_min_len` makes decode attention fastest, as the engine runs it: inside a CUDA graph whose
partition count was fixed at capture from the block table's width (`max_model_len`), for each batch and
context length, on a model's head layout.

    python -m experiments.bench_split_kv [--model qwen2-7b] [--max-model-len 8192] [--record]

Device time per call (median of CUDA-graph replays, triton.testing.do_bench_cudagraph) and the K+V read rate;
the last columns give the fastest threshold and the default's time against it.
"""

from __future__ import annotations

import argparse

import torch

from experiments.paged import paged_inputs
from experiments.record import add_record_args, header, record
from experiments.timing import time_ms
from kernels.paged_decode import DecodeTuning, _num_partitions, launch_paged_decode
from runtime.model.presets import preset_config

BATCHES = (1, 4, 8, 16, 32, 64, 128)
CONTEXTS = (512, 1024, 1800, 4096)
THRESHOLDS = (64, 256, 512, 2048, 10**6)  # 10**6: never split
BLOCK = 16


def device_us(q: torch.Tensor, kv: tuple[torch.Tensor, ...], threshold: int, tuning: DecodeTuning) -> float:
    run = lambda: launch_paged_decode(q, *kv, scale=q.shape[-1] ** -0.5, qk_clip=None,
                                      split_kv_min_len=threshold, tuning=tuning)
    return time_ms(run, graph=True) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen2-7b")
    parser.add_argument("--max-model-len", type=int, default=8192)
    add_record_args(parser)
    args = parser.parse_args()
    cfg = preset_config(args.model)
    q_heads, kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // q_heads
    width = args.max_model_len // BLOCK
    cols = " | ".join(f"{'never' if t == 10**6 else t} us" for t in THRESHOLDS)
    lines = [f"| batch x ctx | partitions | {cols} | best | 2048 / best |",
             "|---|---|" + "---|" * len(THRESHOLDS) + "---|---|"]
    tuning = DecodeTuning()
    for batch in BATCHES:
        for ctx in CONTEXTS:
            kv = paged_inputs(batch, ctx, BLOCK, kv_heads=kv_heads, head_dim=head_dim, width=width)
            q = torch.randn(batch, q_heads, head_dim, device="cuda", dtype=torch.bfloat16)
            times = {t: device_us(q, kv, t, tuning) for t in THRESHOLDS}
            best = min(times, key=times.get)
            parts = _num_partitions(batch * kv_heads, width * BLOCK, tuning, q.device)
            row = (f"| {batch} x {ctx} | {parts} | " + " | ".join(f"{times[t]:.1f}" for t in THRESHOLDS)
                   + f" | {'never' if best == 10**6 else best} | {times[2048] / times[best]:.2f} |")
            lines.append(row)
            print(row, flush=True)
            del kv
    table = header(f"Decode attention by split_kv_min_len ({args.model} heads, graphs, table width "
                   f"{args.max_model_len})") + "\n" + "\n".join(lines)
    print("\n" + table)
    if args.record:
        record(table + "\n", args.results)


if __name__ == "__main__":
    main()
