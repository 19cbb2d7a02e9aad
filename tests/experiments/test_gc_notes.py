"""bench_vs_vllm's notes on the collections that ran during pagetune's open-loop replays."""

from __future__ import annotations

from experiments.bench_vs_vllm import gc_notes


def _result(engine: str, replays: list[dict]) -> dict:
    return {"engine": engine, "model": "llama-3-8b", "workloads": [{"name": "mixed", "open": {"replays": replays}}]}


def test_gc_notes_per_replay():
    runs = [{"gc": {"collections": 41, "full": 1, "longest_ms": 212.04, "total_ms": 260.0}},
            {"gc": {"collections": 39, "full": 0, "longest_ms": 3.26, "total_ms": 40.0}}]
    assert gc_notes([_result("pagetune-thawed", runs)]) == [
        "mixed on pagetune-thawed: collections per replay 41 (1 full), 39 (0 full), the longest 212.0, 3.3 ms"]


def test_gc_notes_leave_out_results_without_them():
    assert gc_notes([_result("vllm", [{"ttft_p99_s": 0.1}]), {"engine": "pagetune", "model": "m", "workloads": [
        {"name": "uniform"}]}]) == []
