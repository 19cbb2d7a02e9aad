"""vLLM's open-loop latencies in the side-by-side bench come from the engine core's stamps, as pagetune's own."""

import numpy as np
import pytest

from experiments.bench_vs_vllm import Streamed, client_notes, streamed_latencies


def _rows() -> list[Streamed]:
    # request 0: the client took its first delta late, merged with the next (2 tokens), and the rest quickly
    # request 1: the client kept up
    return [
        Streamed(arrival=10.0, client_first=10.5, client_end=10.6, tokens=3, first_delta_tokens=2,
                 engine_first=10.1, engine_last=10.5),
        Streamed(arrival=11.0, client_first=11.2, client_end=11.6, tokens=5, first_delta_tokens=1,
                 engine_first=11.19, engine_last=11.59),
    ]


def test_engine_stamps_give_the_figures_and_the_client_is_kept_beside() -> None:
    got = streamed_latencies(_rows())
    assert got["stamps"] == "engine"
    assert got["ttft"] == pytest.approx([0.1, 0.19])
    assert got["tpot"] == pytest.approx([0.2, 0.1])  # (10.5 - 10.1) / 2, (11.59 - 11.19) / 4
    assert got["first_delta_merged"] == 1
    # the client's view: a late first token (0.5 s) and a short TPOT ((10.6 - 10.5) / 2 = 0.05 s)
    assert got["client"]["ttft_p50_s"] == pytest.approx(0.35)
    assert got["client"]["tpot_p50_s"] == pytest.approx((0.05 + 0.1) / 2)
    assert got["tpot_p50_s"] == pytest.approx(0.15)


def test_without_engine_stats_the_client_stamps_are_used_and_said() -> None:
    rows = [r._replace(engine_first=0.0, engine_last=0.0) for r in _rows()]
    got = streamed_latencies(rows)
    assert got["stamps"] == "client"
    assert got["ttft"] == pytest.approx([0.5, 0.2])
    assert got["tpot"] == pytest.approx([0.05, 0.1])


def test_a_one_token_request_has_a_ttft_and_no_tpot() -> None:
    one = Streamed(12.0, 12.3, 12.3, 1, 1, 12.25, 12.25)
    got = streamed_latencies([*_rows(), one])
    assert got["ttft"] == pytest.approx([0.1, 0.19, 0.25])
    assert len(got["tpot"]) == 2


def test_the_table_notes_say_which_stamps_and_what_the_client_saw() -> None:
    replay = streamed_latencies(_rows())
    results = [{"engine": "vllm", "workloads": [{"name": "mixed", "open": {"replays": [replay, replay]}}]},
               {"engine": "pagetune", "workloads": [{"name": "mixed", "open": {"replays": [{"ttft_p99_s": 1.0}]}}]}]
    (note,) = client_notes(results)
    assert note == ("mixed on vLLM: engine stamps; its client per replay: TTFT p99 0.497, 0.497 s, "
                    "TPOT p99 99.5, 99.5 ms; first deltas merged 1, 1")


def test_paired_requests_show_where_a_tpot_tail_comes_from() -> None:
    from experiments.bench_vs_vllm import paired_notes

    def opened(per_request):
        return {"name": "azure-code", "open": {"lens": [[100, 2], [200, 9], [300, 1]],
                                               "replays": [{"per_request": per_request}]}}

    results = [
        {"engine": "pagetune", "model": "qwen2-7b", "workloads": [opened([[0.1, 0.030], [0.1, 0.006], [0.1, None]])]},
        {"engine": "vllm", "model": "qwen2-7b", "workloads": [opened([[0.1, 0.025], [0.1, 0.007], [0.1, None]])]},
    ]
    assert paired_notes(results, top=2) == [
        "azure-code TPOT, paired requests: pagetune longer on 1 of 2; its longest 30.0 vs 25.0 ms (2 out), "
        "6.0 vs 7.0 ms (9 out)",
        # p99 of (0.030, 0.006) over p99 of (0.025, 0.007): (0.006 + 0.99 * 0.024) / (0.007 + 0.99 * 0.018) = 1.20;
        # a draw of request 1 twice gives 0.006 / 0.007 = 0.86
        "azure-code p99, pagetune / vLLM on paired requests (95% bootstrap interval): TTFT 1.00 (1.00-1.00), "
        "TPOT 1.20 (0.86-1.20)"]


def test_the_p99_ratio_pairs_the_requests_in_every_draw() -> None:
    from experiments.bench_vs_vllm import p99_ratio

    rng = np.random.default_rng(1)
    replays = [rng.exponential(1.0, 160).tolist() for _ in range(2)]

    def opened(scale: float, gone: int | None = None) -> dict:
        return {"replays": [{"per_request": [[scale * x, None if i == gone else 2 * scale * x]
                                              for i, x in enumerate(r)]} for r in replays]}

    # vLLM's every request twice as long: every draw's ratio is exactly one half, whatever the draw
    assert p99_ratio(opened(1.0), opened(2.0), 0) == (0.5, 0.5, 0.5)
    assert p99_ratio(opened(3.0), opened(3.0), 1) == (1.0, 1.0, 1.0)
    # a request without a TPOT on one side is left out of both
    assert p99_ratio(opened(1.0, gone=5), opened(2.0), 1) == (0.5, 0.5, 0.5)


def test_streamed_rows_pair_up_in_the_arrivals_order() -> None:
    got = streamed_latencies(_rows())
    assert got["per_request"] == [pytest.approx([0.1, 0.2]), pytest.approx([0.19, 0.1])]


def test_pagetune_records_pair_up_in_the_arrivals_order() -> None:
    from experiments.bench_vs_vllm import paired_rows
    from tuner.measure.timeline import RequestRecord

    def record(rid: str, arrival: float, first: float, finished: float, out: int) -> RequestRecord:
        return RequestRecord(request_id=rid, arrival=arrival, first_scheduled=arrival, first_token=first,
                             finished=finished, token_times=(), prompt_tokens=10, output_tokens=out,
                             cached_tokens=0, preemptions=0, rejected_reason=None)

    finished_first = [record("o1", 1.0, 1.5, 1.9, 5), record("o0", 0.0, 0.25, 2.25, 3), record("o2", 2.0, 2.5, 2.5, 1)]
    assert paired_rows(finished_first, ["o0", "o1", "o2"]) == [
        [0.25, 1.0], [0.5, pytest.approx(0.1)], [0.5, None]]


def test_each_pagetune_variant_gets_its_own_ratio_to_vllm() -> None:
    from experiments.bench_vs_vllm import ratios

    def result(engine: str, tok_s: float) -> dict:
        return {"engine": engine, "model": "qwen2-7b", "workloads": [{"name": "azure-code", "warm_tok_s": tok_s}]}

    got = ratios([result("pagetune", 400.0), result("pagetune-fa4", 420.0), result("vllm", 400.0)])
    assert got == ["azure-code on qwen2-7b: pagetune / vLLM warm 1.00x",
                   "azure-code on qwen2-7b: pagetune-fa4 / vLLM warm 1.05x"]
