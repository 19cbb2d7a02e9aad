"""Short prefill chunks: the SDPA path against the Triton flash kernel, per engine step (GPU).

    python -m experiments.bench_prefill_paths [--record] [--results experiments/RESULTS.md]

`kernel.flash_min_len` sends chunks shorter than it to SDPA over their gathered K/V and the rest to the
flash kernel. This times one step's prefill attention both ways for chunks of 2 to 63 tokens: with
`flash_min_len` 64 (every chunk here under it takes SDPA, the old default) and with 1 (every chunk takes
flash). Llama-3-8B attention shape (32 query / 8 kv heads, head_dim 128, bf16, block size 16), 32 layers
called eagerly as the engine calls them, the paths planned once a step (`kernels.plan_prefill`, in the
time). A column checks that both paths agree (largest absolute difference of the outputs).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from experiments.bench_short_chunks import HEAD_DIM, LAYERS, inputs
from experiments.record import add_record_args, emit
from kernels import plan_prefill, prefill_attention

SDPA_MIN_LEN, FLASH_MIN_LEN = 64, 1
CASES = {  # name -> (chunk tokens, context at the chunk's end) per sequence
    **{f"a {n}-token prompt": [(n, n)] for n in (2, 8, 23, 48, 63)},
    **{f"a {n}-token chunk over {ctx:,}": [(n, ctx)] for ctx in (2048, 8190) for n in (2, 4, 16, 32, 63)},
    "short chunks 19, 37, 48 + a 2,048 flash chunk": [(19, 19), (37, 37), (48, 48), (2048, 2048)],
    "8 chunks of 16 over 4,096": [(16, 4096)] * 8,
}


def step_ms(args, qsl: list[int], ctx: list[int], min_len: int, repeats: int = 30) -> tuple[float, torch.Tensor]:
    times, out = [], None
    for _ in range(repeats + 3):
        torch.cuda.synchronize()
        start = time.perf_counter()
        plan = plan_prefill(qsl, ctx, min_len, args[0].device)
        for _ in range(LAYERS):
            out = prefill_attention(*args, scale=HEAD_DIM**-0.5, qk_clip=None, flash_min_len=min_len,
                                    use_triton=True, plan=plan)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times[3:]), out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_record_args(p)
    a = p.parse_args()
    rows = [f"| step's prefill part | SDPA (flash_min_len {SDPA_MIN_LEN}) ms | flash (flash_min_len "
            f"{FLASH_MIN_LEN}) ms | SDPA / flash | max abs diff |", "|---|---|---|---|---|"]
    for name, chunks in CASES.items():
        args, qsl, ctx = inputs(chunks)
        sdpa, out_sdpa = step_ms(args, qsl, ctx, SDPA_MIN_LEN)
        flash, out_flash = step_ms(args, qsl, ctx, FLASH_MIN_LEN)
        diff = (out_sdpa.float() - out_flash.float()).abs().max().item()
        rows.append(f"| {name} | {sdpa:.2f} | {flash:.2f} | {sdpa / flash:.2f}x | {diff:.3g} |")
        print(rows[-1], flush=True)
    emit("\n".join(rows), a, f"Prefill attention of one step ({LAYERS} layers, eager): short chunks by SDPA vs "
         "the flash kernel")


if __name__ == "__main__":
    main()
