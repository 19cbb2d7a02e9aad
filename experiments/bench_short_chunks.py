"""A step's prefill attention with short chunks: the paths planned once a step vs in every layer (GPU).

    python -m experiments.bench_short_chunks [--record] [--results experiments/RESULTS.md]

Llama-3-8B attention shape (32 query / 8 kv heads, head_dim 128, bf16, block size 16). One step's
prefill part is called 32 times (the layers), eagerly, as the engine calls it: wall time per step,
the host's launches and any device reads included. "per layer" passes no plan, so every call reads the
chunk lengths back (`.tolist()`) and builds its index tensors and copies them to the device (each copy
from pageable memory waits for the device); "once a step" passes the plan `runtime.inputs` builds
(`kernels.plan_prefill`), planning included in the time. Cases: a short chunk beside decodes' worth of
context (the Mooncake steps that took 3-4x their prediction), short chunks only, and flash chunks only.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from experiments.record import add_record_args, emit
from kernels import plan_prefill, prefill_attention

Q_HEADS, KV_HEADS, HEAD_DIM, BLOCK, LAYERS, FLASH_MIN_LEN = 32, 8, 128, 16, 32, 64
CASES = {  # name -> (chunk tokens, context at the chunk's end) per sequence
    "one 23-token prompt": [(23, 23)],
    "a 4-token chunk over 8,190": [(4, 8190)],
    "a 70-token chunk over 7,939 (flash)": [(70, 7939)],
    "short chunks 19, 37, 48 + a 2,048 flash chunk": [(19, 19), (37, 37), (48, 48), (2048, 2048)],
}


def inputs(chunks: list[tuple[int, int]]):
    blocks = [-(-ctx // BLOCK) for _, ctx in chunks]
    pool = torch.randn(sum(blocks) + 1, BLOCK, KV_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    k_cache, v_cache = pool, torch.randn_like(pool)
    tables = torch.zeros(len(chunks), max(blocks), dtype=torch.int32)
    first = 1
    for row, n in enumerate(blocks):
        tables[row, :n] = torch.arange(first, first + n)
        first += n
    qsl = [0]
    for n, _ in chunks:
        qsl.append(qsl[-1] + n)
    ctx = [c for _, c in chunks]
    query = torch.randn(qsl[-1], Q_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    return (query, k_cache, v_cache, tables.cuda(), torch.tensor(qsl, dtype=torch.int32, device="cuda"),
            torch.tensor(ctx, dtype=torch.int32, device="cuda")), qsl, ctx


def step_ms(args, qsl: list[int], ctx: list[int], planned: bool, repeats: int = 30) -> float:
    times = []
    for _ in range(repeats + 3):
        torch.cuda.synchronize()
        start = time.perf_counter()
        plan = plan_prefill(qsl, ctx, FLASH_MIN_LEN, args[0].device) if planned else None
        for _ in range(LAYERS):
            prefill_attention(*args, scale=HEAD_DIM**-0.5, qk_clip=None, flash_min_len=FLASH_MIN_LEN,
                              use_triton=True, plan=plan)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times[3:])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_record_args(p)
    a = p.parse_args()
    rows = ["| step's prefill part | per layer ms | once a step ms | per layer / once |", "|---|---|---|---|"]
    for name, chunks in CASES.items():
        args, qsl, ctx = inputs(chunks)
        each, once = step_ms(args, qsl, ctx, False), step_ms(args, qsl, ctx, True)
        rows.append(f"| {name} | {each:.2f} | {once:.2f} | {each / once:.2f}x |")
    emit("\n".join(rows), a, f"Prefill attention of one step ({LAYERS} layers, eager): paths planned per layer "
         "vs once a step")


if __name__ == "__main__":
    main()
