"""Fused layer kernels (RMSNorm + residual, rotary, silu-and-mul) under Triton's interpreter.

Run by test_kernel_interpreter.py in a subprocess. Also one tiny model end to end: the Triton path
(interpreted) against the torch path, greedy, in fp32.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # why: must precede triton's import (see kernels/_triton.py)

import pytest
import torch

from kernels.activation import silu_and_mul, silu_and_mul_reference
from kernels.norm import rms_norm, rms_norm_reference
from kernels.rotary import apply_rotary, apply_rotary_reference


def _randn(*shape: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("with_residual", [False, True])
def test_rms_norm_matches_reference(dtype: torch.dtype, with_residual: bool) -> None:
    x = _randn(5, 2 * 48, seed=1, dtype=dtype)[:, :48]  # a strided view, hidden 48 (not a power of 2)
    weight = _randn(48, seed=2, dtype=dtype)
    residual = _randn(5, 48, seed=3, dtype=dtype) if with_residual else None
    before = x.clone()
    out, res = rms_norm(x, weight, 1e-5, residual)
    ref_out, ref_res = rms_norm_reference(x, weight, 1e-5, residual)
    assert torch.equal(res, ref_res)  # the add rounds exactly as torch's does
    tol = 1e-6 if dtype == torch.float32 else 2e-3  # fp16: one unit in the last place at most
    torch.testing.assert_close(out, ref_out, rtol=tol, atol=tol)
    assert torch.equal(x, before)  # inputs untouched


@pytest.mark.parametrize("with_residual", [False, True])
def test_rms_norm_writes_the_residual_stream_into_residual_out_in_place(with_residual: bool) -> None:
    """A CUDA-graph piece's static buffer: residual_out may be the residual itself (each row read, then written)."""
    x, weight = _randn(5, 48, seed=1), _randn(48, seed=2)
    residual = _randn(5, 48, seed=3)
    expected = rms_norm_reference(x, weight, 1e-5, residual if with_residual else None)
    buffer = residual.clone() if with_residual else torch.zeros(5, 48)
    out, res = rms_norm(x, weight, 1e-5, buffer if with_residual else None, residual_out=buffer)
    assert res is buffer and torch.equal(buffer, expected.residual)
    torch.testing.assert_close(out, expected.normed, rtol=1e-6, atol=1e-6)
    ref_buffer = residual.clone() if with_residual else torch.zeros(5, 48)
    _, ref_res = rms_norm_reference(x, weight, 1e-5, ref_buffer if with_residual else None, residual_out=ref_buffer)
    assert ref_res is ref_buffer and torch.equal(ref_buffer, expected.residual)


def test_rms_norm_rejects_a_residual_out_of_another_shape() -> None:
    with pytest.raises(ValueError, match="rms_norm: residual_out must match x \\(\\(2, 8\\)"):
        rms_norm(_randn(2, 8, seed=1), _randn(8, seed=2), 1e-6, residual_out=torch.zeros(3, 8))


def test_rms_norm_rejects_mismatched_weight() -> None:
    with pytest.raises(ValueError, match="rms_norm: weight must be \\[8\\]"):
        rms_norm(_randn(2, 8, seed=1), _randn(9, seed=2), 1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_rotary_in_place_on_strided_views_matches_reference(dtype: torch.dtype) -> None:
    qkv = _randn(6, (4 + 2 + 2) * 16, seed=4, dtype=dtype)  # a fused projection: q (4 heads) | k (2) | v (2)
    q, k = qkv[:, :64].view(6, 4, 16), qkv[:, 64:96].view(6, 2, 16)
    angles = _randn(6, 8, seed=5) * 3
    cos, sin = torch.cat((angles, angles), -1).cos().to(dtype), torch.cat((angles, angles), -1).sin().to(dtype)
    v_before = qkv[:, 96:].clone()
    ref_q, ref_k = apply_rotary_reference(q, cos, sin), apply_rotary_reference(k, cos, sin)
    assert apply_rotary(q, cos, sin) is q and apply_rotary(k, cos, sin) is k
    tol = 1e-6 if dtype == torch.float32 else 2e-3
    torch.testing.assert_close(q, ref_q, rtol=tol, atol=tol)
    torch.testing.assert_close(k, ref_k, rtol=tol, atol=tol)
    assert torch.equal(qkv[:, 96:], v_before)  # v is not touched


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_rotary_reads_tables_at_positions_q_and_k_in_one_launch(dtype: torch.dtype) -> None:
    qkv = _randn(6, (4 + 2 + 2) * 16, seed=7, dtype=dtype)
    qk = qkv[:, :96].view(6, 6, 16)  # q (4 heads) and k (2) as one view
    angles = _randn(50, 8, seed=8) * 3
    cos, sin = torch.cat((angles, angles), -1).cos().to(dtype), torch.cat((angles, angles), -1).sin().to(dtype)
    positions = torch.tensor([0, 49, 7, 7, 3, 20])
    ref = apply_rotary_reference(qk, cos, sin, positions)
    # the same rows gathered first: the table path is the row path at those rows
    assert torch.equal(ref, apply_rotary_reference(qk, cos[positions], sin[positions]))
    v_before = qkv[:, 96:].clone()
    assert apply_rotary(qk, cos, sin, positions) is qk
    tol = 1e-6 if dtype == torch.float32 else 2e-3
    torch.testing.assert_close(qk, ref, rtol=tol, atol=tol)
    assert torch.equal(qkv[:, 96:], v_before)


def test_rotary_rejects_positions_of_another_length() -> None:
    x = _randn(3, 2, 8, seed=9)
    table = _randn(10, 8, seed=10)
    with pytest.raises(ValueError, match=r"positions must be int64 \[3\]"):
        apply_rotary(x, table, table, torch.tensor([1, 2]))


@pytest.mark.parametrize("inter", [40, 1100])  # 1100: two column programs, the second partly masked
def test_silu_and_mul_matches_reference(inter: int) -> None:
    x = _randn(3, 2 * inter, seed=6) * 4
    torch.testing.assert_close(silu_and_mul(x), silu_and_mul_reference(x), rtol=1e-6, atol=1e-6)


def test_tiny_model_triton_path_matches_torch_path() -> None:
    from runtime import LLM, SamplingParams

    prompts = [[1, 2, 3, 4, 5, 6, 7], [9, 8, 7], list(range(20, 60))]
    params = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)

    def greedy(backend: str) -> list[list[int]]:
        llm = LLM(model="tiny", attention_backend=backend, dtype="float32", block_size=4, flash_min_len=8)
        return [r.outputs[0].token_ids for r in llm.generate(prompts, params, use_tqdm=False)]

    assert greedy("triton") == greedy("torch")


@pytest.mark.parametrize("model", ["tiny", "tiny-qwen2"])
def test_pieces_on_the_triton_path_give_the_tokens_of_the_plain_forward(model: str) -> None:
    """Piecewise graphs' pieces (uncaptured) on the interpreted Triton kernels: the qkv GEMM (with Qwen2's bias)
    into the static buffer, the rotary and both norms in place there, chunked prompts beside decodes."""
    from runtime import LLM, SamplingParams
    from runtime.piecewise import PiecewiseGraphs

    prompts = [[1, 2, 3, 4, 5, 6, 7], [9, 8, 7], list(range(20, 60))]
    params = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
    knobs = dict(attention_backend="triton", dtype="float32", block_size=4, flash_min_len=8, max_num_batched_tokens=16)

    def greedy(pieces: bool) -> list[list[int]]:
        llm = LLM(model=model, **knobs)
        runner = llm.engine.runner
        if pieces:
            runner.piecewise = PiecewiseGraphs(runner.model, 16, torch.device("cpu"), use_triton=True, capture=False)
        tokens = [r.outputs[0].token_ids for r in llm.generate(prompts, params, use_tqdm=False)]
        assert (runner.paths["piecewise"] > 0) == pieces
        return tokens

    assert greedy(True) == greedy(False)
