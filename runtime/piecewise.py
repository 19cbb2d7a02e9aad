"""CUDA graphs for steps of any composition (prefill chunks, decodes, several tiers) up to
`kernel.max_cudagraph_capture_size` tokens: the model captured in pieces, the attention between them run
eagerly (vLLM's piecewise graphs, without torch.compile).

    piece 0    embed -> layer 0 up to its attention (norm, qkv projection, rotary)        graph
    attention  layer 0: K/V written, decode and prefill attention (metadata of this step)  eager
    piece i    layer i-1's o_proj, norm, MLP -> layer i up to its attention               graph
    ...
    piece L    layer L-1's o_proj, norm, MLP -> the final norm                            graph

A step of T tokens replays the pieces of the smallest captured bucket >= T after copying its ids and
positions into static buffers. Rows T..bucket are padding: stale ids and positions of earlier steps (valid
values), never written to the cache (they are in no tier), their attention rows zeroed, their hidden
states never read. The pieces hand the fused q | k | v projection, the residual stream and the attention's
output to each other through static buffers shared by every layer and bucket, written in place (the qkv
GEMM writes into its buffer, the rotary rotates there, each norm updates the residual where it lies, the
attention writes its output there): no copy between pieces. A piece's graph keeps only its own
intermediates, in one memory pool shared by all pieces (they never run concurrently).
"""

from __future__ import annotations

import torch

from runtime.attention import AttentionMetadata, KVCache
from runtime.limits import piecewise_bucket, piecewise_buckets
from runtime.model.llama import QKV, LlamaForCausalLM


class PiecewiseGraphs:
    """`capture=False` runs the same pieces on the same static buffers without graphs (any device): the
    plumbing checked on a CPU against the plain forward."""

    def __init__(self, model: LlamaForCausalLM, max_tokens: int, device: torch.device, *, use_triton: bool = True,
                 capture: bool = True) -> None:
        self.model, self.use_triton = model, use_triton
        self.layers = model.model.layers
        self.sizes = piecewise_buckets(max_tokens)
        top = self.sizes[-1]
        attn = self.layers[0].self_attn
        dtype = model.lm_head.weight.dtype
        hidden = model.config.hidden_size

        def buf(*shape: int) -> torch.Tensor:
            return torch.zeros(*shape, dtype=dtype, device=device)

        self.ids = torch.zeros(top, dtype=torch.int64, device=device)
        self.positions = torch.zeros(top, dtype=torch.int64, device=device)
        self.qkv = buf(top, sum(attn.split))  # [top, Hq*D | Hkv*D | Hkv*D]: views of it are what attention reads
        self.attn_out = buf(top, attn.num_heads, attn.head_dim)
        self.residual, self.hidden = buf(top, hidden), buf(top, hidden)
        self.graphs: dict[int, list[torch.cuda.CUDAGraph]] = {}
        if capture:
            self._capture_all()

    def bucket(self, num_tokens: int) -> int | None:
        """The captured size a step of `num_tokens` replays (None: larger than every capture, run eagerly)."""
        return piecewise_bucket(self.sizes, num_tokens)

    def _piece(self, i: int, t: int) -> None:
        """Piece i on the first t rows of the static buffers (see the module's diagram)."""
        triton = self.use_triton
        rope = self.model.rotary(self.positions[:t], self.hidden.dtype)
        residual = self.residual[:t]
        if i == 0:
            h, stream = self.model.model.embed_tokens(self.ids[:t]), None  # [t, H]; the norm copies it to residual
        else:
            prev = self.layers[i - 1]
            h = prev.self_attn.o_proj(self.attn_out[:t].reshape(t, -1))
            h, stream = prev.after_attention(h, residual, triton, residual_out=residual)
        if i == len(self.layers):
            self.hidden[:t].copy_(self.model.model.norm(h, stream, triton).normed)
            return
        self.layers[i].before_attention(h, stream, rope, triton, qkv_out=self.qkv[:t], residual_out=residual)

    @torch.inference_mode()
    def _capture_all(self) -> None:
        pieces = range(len(self.layers) + 1)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm up: Triton kernels compiled, GEMM handles made, outside capture
            for t in self.sizes:
                for i in pieces:
                    self._piece(i, t)
        torch.cuda.current_stream().wait_stream(stream)
        pool = torch.cuda.graph_pool_handle()
        for t in reversed(self.sizes):  # largest first: smaller buckets fit in the memory it reserved
            graphs = []
            for i in pieces:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool):
                    self._piece(i, t)
                graphs.append(graph)
            self.graphs[t] = graphs
        torch.cuda.synchronize()

    @torch.inference_mode()
    def run(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
            caches: list[KVCache]) -> torch.Tensor:
        """Hidden states [bucket, H] of a step (rows past len(input_ids) are padding); it must fit a bucket."""
        n = input_ids.shape[0]
        t = self.bucket(n)
        assert t is not None, f"a step of {n} tokens is larger than every captured piece"
        self.ids[:n].copy_(input_ids, non_blocking=True)
        self.positions[:n].copy_(positions, non_blocking=True)
        graphs = self.graphs.get(t)
        for i, layer in enumerate(self.layers):
            self._replay(graphs, i, t)
            layer.self_attn.attend(self._qkv(t), meta, caches, out=self.attn_out[:t])
        self._replay(graphs, len(self.layers), t)
        return self.hidden[:t]

    def _qkv(self, t: int) -> QKV:
        """q, k, v of the first t rows: views of the fused projection's static buffer, as `Attention.project`
        returns them."""
        attn = self.layers[0].self_attn
        q_size, kv_size, _ = attn.split
        d = attn.head_dim
        rows = self.qkv[:t]
        return QKV(rows[:, :q_size].view(t, -1, d), rows[:, q_size : q_size + kv_size].view(t, -1, d),
                   rows[:, q_size + kv_size :].view(t, -1, d))

    def _replay(self, graphs: list[torch.cuda.CUDAGraph] | None, i: int, t: int) -> None:
        if graphs is None:  # not captured: the same piece, run eagerly
            self._piece(i, t)
        else:
            graphs[i].replay()
