"""The skinny GEMM's picks: which row counts take which launch, how the start-up timing decides, and the checks
of the kernel's wrapper (no Triton launch here: the kernel itself is tested in tests/kernels/interp_skinny.py and
on the GPU)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernels.skinny_gemm import CANDIDATES, SkinnyTuning, skinny_linear, skinny_linear_reference
from runtime.config import EngineConfig
from runtime.model.linear import ROW_BUCKETS, Linear, SkinnyPicks
from runtime.skinny import MARGIN, clear_skinny, pick_skinny

A, B = SkinnyTuning(16, 512, 4, 3), SkinnyTuning(64, 256, 8, 3)


def test_a_call_takes_the_picks_of_the_smallest_bucket_that_holds_its_rows() -> None:
    picks = SkinnyPicks((A, None, B, None, A))
    assert [picks.tuning_for(m) for m in range(0, 18)] == [
        None, A, None, B, B, None, None, None, None, A, A, A, A, A, A, A, A, None]


def test_a_new_layer_has_no_picks_and_is_torchs_linear_into_out_too() -> None:
    torch.manual_seed(0)
    layer = Linear(8, 5, bias=True)
    assert layer.skinny == SkinnyPicks() and all(p is None for p in layer.skinny.by_bucket)
    x, out = torch.randn(3, 8), torch.empty(3, 5)
    with torch.no_grad():
        assert torch.equal(layer(x), F.linear(x, layer.weight, layer.bias))
        assert layer(x, out) is out and torch.equal(out, torch.addmm(layer.bias, x, layer.weight.t()))


class _Model(torch.nn.Module):
    """Three layers of one shape, one of another (with a bias), and a plain nn.Linear the picks leave alone."""

    def __init__(self) -> None:
        super().__init__()
        self.same = torch.nn.ModuleList(Linear(32, 16, bias=False) for _ in range(3))
        self.other = Linear(16, 48, bias=True)
        self.plain = torch.nn.Linear(16, 16)


def _scripted(times: list[float]):
    """A timer returning `times` in call order (the pass itself is not run): per shape and row bucket, cuBLAS's
    pass comes first, then each candidate's."""
    it = iter(times)
    return lambda run: next(it)


def test_the_timing_keeps_a_skinny_launch_only_where_it_beats_cublas_by_the_margin() -> None:
    model = _Model()
    per_bucket = len(CANDIDATES) + 1
    rest = [99] * (len(CANDIDATES) - 3)
    # shape 16 x 32 (3 layers): rows 1 -> candidate 2 at 90 vs 100 (picked); rows 2 -> 97.5 vs 100 (not: the
    # margin is 97%); rows 4, 8, 16 -> every candidate slower. Shape 48 x 16: candidate 0 wins everywhere at 50.
    same = [100, 99, 99, 90, *rest] + [100, 97.5, 99, 99, *rest] + [10, 20, 20, 20, *[20] * len(rest)] * 3
    other = [100, 50, 60, 60, *[60] * len(rest)] * len(ROW_BUCKETS)
    assert len(same) == len(other) == per_bucket * len(ROW_BUCKETS)
    timings = pick_skinny(model, time_pass=_scripted(same + other))
    assert MARGIN == 0.97
    assert [(t.out_features, t.in_features, t.layers, t.rows, t.picked) for t in timings] == [
        (16, 32, 3, 1, True), (16, 32, 3, 2, False), (16, 32, 3, 4, False), (16, 32, 3, 8, False),
        (16, 32, 3, 16, False), *[(48, 16, 1, m, True) for m in ROW_BUCKETS]]
    assert timings[0].best == CANDIDATES[2] and timings[0].best_us == 90 and timings[0].cublas_us == 100
    assert all(layer.skinny == SkinnyPicks((CANDIDATES[2], None, None, None, None)) for layer in model.same)
    assert model.other.skinny == SkinnyPicks((CANDIDATES[0],) * 5)
    assert not hasattr(model.plain, "skinny")
    assert clear_skinny(model) == [] and model.other.skinny == SkinnyPicks()


@pytest.mark.parametrize(("x", "w", "bias", "message"), [
    (torch.zeros(17, 8), torch.zeros(4, 8), None, "at most 16 rows, got 17"),
    (torch.zeros(2, 8), torch.zeros(4, 9), None, "x has 8 columns but weight has 9"),
    (torch.zeros(2, 8), torch.zeros(4, 8, dtype=torch.float16), None, "x and weight must share one dtype"),
    (torch.zeros(2, 8), torch.zeros(8, 4).t(), None, "x and weight need a contiguous last dimension"),
    (torch.zeros(2, 8), torch.zeros(4, 8), torch.zeros(5), r"bias must be a contiguous \[4\]"),
    (torch.zeros(8), torch.zeros(4, 8), None, r"x must be \[M, K\] and weight \[N, K\]"),
])
def test_the_wrapper_names_what_is_wrong(x, w, bias, message: str) -> None:
    with pytest.raises(ValueError, match=f"skinny_linear: {message}"):
        skinny_linear(x, w, bias)
    with pytest.raises(ValueError, match=f"skinny_linear: {message}"):
        skinny_linear_reference(x, w, bias)


@pytest.mark.parametrize("tuning", [SkinnyTuning(16, 64, 4, 3, split_k=0), SkinnyTuning(8, 64, 4, 3),
                                    SkinnyTuning(16, 8, 4, 3, split_k=2)])
def test_the_wrapper_refuses_a_tuning_triton_cannot_launch(tuning: SkinnyTuning) -> None:
    with pytest.raises(ValueError, match=r"skinny_linear: tuning needs split_k >= 1 and tiles of at least 16"):
        skinny_linear(torch.zeros(2, 8), torch.zeros(4, 8), tuning=tuning)


def test_the_wrapper_refuses_an_out_of_another_shape_before_any_launch() -> None:
    with pytest.raises(ValueError, match=r"skinny_linear: out must be a \[2, 4\] torch.float32"):
        skinny_linear(torch.zeros(2, 8), torch.zeros(4, 8), out=torch.zeros(2, 5))


def test_a_shape_is_timed_once_per_process_and_later_engines_take_its_picks(monkeypatch) -> None:
    import runtime.skinny

    calls: list[int] = []
    monkeypatch.setattr(runtime.skinny, "_MEASURED", {})
    monkeypatch.setattr(runtime.skinny, "_cuda_median_us", lambda run: calls.append(1) or (
        100 if len(calls) % (len(CANDIDATES) + 1) == 1 else 50))
    first = pick_skinny(_Model())
    assert len(calls) == 2 * len(ROW_BUCKETS) * (len(CANDIDATES) + 1)
    again = _Model()
    assert pick_skinny(again) == first and len(calls) == 2 * len(ROW_BUCKETS) * (len(CANDIDATES) + 1)
    assert again.other.skinny == SkinnyPicks((CANDIDATES[0],) * 5)


def test_the_knob_is_inert_where_no_engine_times_the_picks() -> None:
    """The runner picks on a CUDA device with Triton attention only (`ModelRunner`): elsewhere the knob changes
    nothing, and a search leaves it out there."""
    auto, torch_attention = EngineConfig(), EngineConfig.from_mapping({"kernel": {"attention_backend": "torch"}})
    assert "kernel.skinny_gemm" not in auto.inert_fields("cuda")
    assert "kernel.skinny_gemm" in auto.inert_fields("cpu")
    assert "kernel.skinny_gemm" in torch_attention.inert_fields("cuda")
