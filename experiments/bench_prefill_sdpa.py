"""Would torch's own attention backends beat the Triton prefill kernel on Hopper? cuDNN's fused attention (and
torch's flash for reference), fed by gathering a chunk's paged K/V into dense tensors first, against
`paged_prefill` on the same chunks; and FlashAttention 4 on the pages, where it is installed (the runtime's
`kernel.prefill_kernel: fa4`, `kernels/fa4_prefill.py`).

    python -m experiments.bench_prefill_sdpa [--heads 28 4] [--block-size 128] [--paths sdpa,fa4] [--record]

The question behind it (issue 28): FlashAttention 3 takes 0.57-0.66 of the Triton kernel's time on prefill chunks,
and a decode row's TPOT tail is the steps it shares with those chunks. cuDNN's SDPA on Hopper is a separate
wgmma/TMA implementation that ships inside torch's CUDA build (no new dependency); it reads dense K/V only, so the
chunk's context is gathered from the pages first, and that copy counts in its time:

    per chunk of L query tokens after P cached ones (context C = P + L):
        gather   K, V [C, Hkv, D] from the pages (one indexed read each)
        attend   SDPA(q [1, Hq, L, D], K, V): causal aligned to the bottom right (query i sees positions <= P + i)

Rows per shape: the Triton launch the runtime picks; then per backend (cuDNN, flash) the attention alone on dense
inputs and gather + attention, and torch's paged `varlen_attn` where the installed torch has it (2.13; not
2.11). Each is checked against the fp32 reference first, and that first call's wall time is a column: on a shape
new to it a backend may build a plan (cuDNN does, per shape), which a serving step of a new chunk length would
pay. A failing variant reports its error and the run goes on. Fresh chunks use `is_causal`; chunks after a prefix
a lower-right causal bias, else an explicit boolean mask. Times are CUDA-graph replays (medians).
"""

from __future__ import annotations

import argparse
import inspect
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from experiments.bench_prefill import HEAD_DIM, causal_flops, chunk_inputs
from experiments.record import add_record_args, header, record
from experiments.timing import time_ms
from kernels._gather import gather_kv_padded
from kernels.fa4_prefill import fa4_paged_prefill
from kernels.fa4_prefill import unavailable as fa4_unavailable
from kernels.paged_prefill import default_tuning, launch_paged_prefill, paged_prefill_reference

SHAPES = [(1, 2048, 0), (4, 2048, 0), (1, 2048, 2048), (1, 2048, 4096), (1, 2048, 6144), (2, 1024, 3072)]
BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}


def dense_kv(cache: torch.Tensor, tables: torch.Tensor, ctx: int) -> torch.Tensor:
    """Every sequence's first `ctx` positions as [B, Hkv, ctx, D] (a view of one gathered copy)."""
    return gather_kv_padded(cache, tables, ctx).transpose(1, 2)


def chunk_queries(query: torch.Tensor, seqs: int) -> torch.Tensor:
    """The concatenated chunks [seqs x L, Hq, D] (equal lengths) as [seqs, Hq, L, D] (a view)."""
    return query.view(seqs, -1, *query.shape[1:]).transpose(1, 2)


def visible_mask(length: int, ctx: int, device: torch.device) -> torch.Tensor:
    """Query i of a chunk of `length` after ctx - length cached positions sees positions <= ctx - length + i."""
    return torch.arange(ctx, device=device)[None, :] <= torch.arange(ctx - length, ctx, device=device)[:, None]


def sdpa_chunks(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float, mask: str) -> torch.Tensor:
    """SDPA over equal-length chunks: q [B, Hq, L, D], k and v [B, Hkv, C, D] -> [B, Hq, L, D]. `mask`: "causal"
    (fresh chunks, L == C), "lower-right" (torch's bias for L < C), "bool" (an explicit mask)."""
    length, ctx = q.shape[2], k.shape[2]
    if mask == "causal":
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=True)
    if mask == "lower-right":
        from torch.nn.attention.bias import causal_lower_right

        bias = causal_lower_right(length, ctx)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale, enable_gqa=True)
    visible = visible_mask(length, ctx, q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=visible, scale=scale, enable_gqa=True)


def masks_for(prefix: int) -> list[str]:
    return ["causal"] if prefix == 0 else ["lower-right", "bool"]


def variants(inputs, seqs: int, ctx: int, prefix: int, paths: set[str]) -> list[tuple[str, Callable[[], torch.Tensor]]]:
    """(name, a call returning [T, Hq, D]) for every backend, mask and with / without the gather (`paths` "sdpa"),
    and FlashAttention 4 on the pages (`paths` "fa4": where it runs, `main` leaves it out otherwise)."""
    query, k_cache, v_cache, tables, qsl, lens = inputs
    scale = HEAD_DIM**-0.5
    out = []
    if "fa4" in paths:
        length = query.shape[0] // seqs
        out.append(("FlashAttention 4 (CuTe DSL) on the pages (`kernel.prefill_kernel: fa4`)",
                    lambda: fa4_paged_prefill(query, k_cache, v_cache, tables, qsl, lens, scale=scale,
                                              max_q=length, max_k=ctx)))
    if "sdpa" not in paths:
        return out
    q = chunk_queries(query, seqs)
    k_dense, v_dense = dense_kv(k_cache, tables, ctx).contiguous(), dense_kv(v_cache, tables, ctx).contiguous()
    for backend_name, backend in BACKENDS.items():
        for mask in masks_for(prefix):
            def attend(k, v, backend=backend, mask=mask):
                with sdpa_kernel(backend):
                    o = sdpa_chunks(q, k, v, scale=scale, mask=mask)
                return o.transpose(1, 2).reshape(query.shape)

            out.append((f"{backend_name} {mask}, dense K/V", lambda f=attend: f(k_dense, v_dense)))
            out.append((f"{backend_name} {mask}, gather + attend",
                        lambda f=attend: f(dense_kv(k_cache, tables, ctx), dense_kv(v_cache, tables, ctx))))
    if varlen_pages_available():
        out.append(("torch `varlen_attn` on the pages (its flash, block table)", lambda: paged_varlen(inputs, ctx)))
    return out


def varlen_pages_available() -> bool:
    """Whether the installed torch's `varlen_attn` reads pages and groups heads (torch 2.13 does; 2.11, the GPU
    image's, has neither `block_table` nor `enable_gqa`)."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return False
    return {"block_table", "enable_gqa"} <= set(inspect.signature(varlen_attn).parameters)


def paged_varlen(inputs, ctx: int) -> torch.Tensor:
    """torch's varlen flash attention reading the paged cache through the block table (no gather), where the
    installed torch has it (`torch.nn.attention.varlen`, `block_table`); causal from the bottom right."""
    from torch.nn.attention.varlen import varlen_attn

    query, k_cache, v_cache, tables, qsl, lens = inputs
    length = query.shape[0] // tables.shape[0]
    return varlen_attn(query, k_cache, v_cache, qsl, None, length, ctx, scale=HEAD_DIM**-0.5, window_size=(-1, 0),
                       enable_gqa=True, seqused_k=lens, block_table=tables)


def graph_or_eager_ms(call: Callable[[], torch.Tensor]) -> tuple[float, str]:
    """CUDA-graph replays where the call can be captured, else CUDA events around eager calls (marked)."""
    try:
        return time_ms(call, graph=True), ""
    except Exception:  # why: a backend whose kernels cannot be captured is still timed, and says so
        torch.cuda.synchronize()
        return time_ms(call, graph=False), " (eager)"


def first_call_ms(call: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, float]:
    """The call's result and its wall time, the device waited for: on a shape the backend has not seen, what a
    serving step pays for it (a kernel compile, cuDNN building its plan for that shape)."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = call()
    torch.cuda.synchronize()
    return out, 1e3 * (time.perf_counter() - start)


def shape_rows(seqs: int, length: int, prefix: int, heads: tuple[int, int], block_size: int,
               paths: set[str]) -> list[str]:
    tokens, ctx = seqs * length, prefix + length
    flops = causal_flops(seqs, length, prefix, heads[0])
    inputs = chunk_inputs(seqs, length, prefix, heads, block_size)
    want = paged_prefill_reference(*inputs, scale=HEAD_DIM**-0.5).float()
    tuning = default_tuning(tokens, seqs, seqs * ctx, block_size)
    triton = lambda: launch_paged_prefill(*inputs, scale=HEAD_DIM**-0.5, qk_clip=None, tuning=tuning)
    _, triton_first = first_call_ms(triton)
    triton_ms = time_ms(triton, graph=True)
    shape = f"{seqs} x {length} after {prefix}"
    rows = [f"| {shape} | Triton `paged_prefill` {tuple(tuning)} | - | {triton_first:.1f} | {triton_ms:.3f} | "
            f"{flops / triton_ms / 1e9:.0f} | 1.00 |"]
    print(rows[0], flush=True)
    for name, call in variants(inputs, seqs, ctx, prefix, paths):
        row = f"| {shape} | {name} |"
        try:
            got, first = first_call_ms(call)
            err = (got.float() - want).abs().max().item()
            ms, how = graph_or_eager_ms(call)
            row += f" {err:.1e} | {first:.1f} | {ms:.3f}{how} | {flops / ms / 1e9:.0f} | {triton_ms / ms:.2f} |"
        except Exception as exc:  # why: an unsupported backend or mask must not cost the rest of the device run
            row += f" failed: {type(exc).__name__}: {str(exc).splitlines()[0][:100]} | | | | |"
        rows.append(row)
        print(row, flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heads", type=int, nargs=2, default=[28, 4], metavar=("QUERY", "KV"))
    parser.add_argument("--block-size", type=int, default=128, help="tokens a page of the cache")
    parser.add_argument("--paths", default="sdpa,fa4", help="beside Triton: sdpa (cuDNN, flash, varlen), fa4")
    add_record_args(parser)
    args = parser.parse_args()
    heads = (args.heads[0], args.heads[1])
    paths = set(args.paths.split(","))
    fa4_note = fa4_unavailable(torch.device("cuda"), torch.bfloat16, None) if "fa4" in paths else None
    if fa4_note:
        paths.discard("fa4")
    lines = [f"| seqs x tokens after cached ({args.block_size}-token pages) | path | max abs diff from fp32 reference "
             "| first call ms (this shape new) | ms | TFLOP/s | Triton time / this |", "|---|---|---|---|---|---|---|"]
    for seqs, length, prefix in SHAPES:
        lines += shape_rows(seqs, length, prefix, heads, args.block_size, paths)
    title = f"Prefill attention: torch's SDPA and FA4 against the Triton kernel ({heads[0]} / {heads[1]} heads)"
    notes = f"cuDNN {torch.backends.cudnn.version()}." + (f" No FA4 row: FA4 {fa4_note}." if fa4_note else "")
    table = header(title) + notes + "\n\n" + "\n".join(lines)
    print("\n" + table)
    if args.record:
        record(table + "\n", args.results)


if __name__ == "__main__":
    main()
