"""Replay over HTTP against pagetune's own server: the same trace gives the same token counts as the in-process
replay, the same metrics through the same measurement; a stop closes the open streams; errors are rejections."""

from __future__ import annotations

import math

import pytest

from runtime import EngineConfig, LLMEngine
from tests.runtime.serve.server_factories import running_server, wait_idle
from tests.tuner.tuner_factories import job, request, tiny_runtime
from tuner.config import SloConfig
from tuner.executors.http import HttpExecutor
from tuner.measure.http_replay import http_replay
from tuner.measure.job import TrialStatus
from tuner.measure.metrics import summarize
from tuner.measure.replay import ReplayClock, replay

# 24 requests over 1.2 s, prompts of 8..38 tokens (disjoint: no prefix hits), outputs of 3..11 tokens
TRACE = tuple(request(f"r{i:02d}", 0.05 * i, 8 + 5 * (i % 7), 3 + i % 9, first_id=10 + 40 * i) for i in range(24))
CONFIG = EngineConfig.from_mapping({**tiny_runtime(), "debug_integrity": True})
SLO = SloConfig(ttft_s=2.0, tpot_s=0.5)


@pytest.fixture(scope="module")
def served():
    with running_server(CONFIG) as s:
        yield s


def _counts(records) -> list[tuple[str, int, int]]:
    return sorted((r.request_id, r.prompt_tokens, r.output_tokens) for r in records)


def test_http_replay_agrees_with_the_in_process_replay(served):
    clock = ReplayClock()
    local = replay(LLMEngine(CONFIG, clock=clock), clock, TRACE)
    remote = http_replay(served.base_url, "tiny", TRACE)
    expected = sorted((r.request_id, r.prompt_tokens, r.output_tokens) for r in TRACE)
    assert _counts(local.records) == _counts(remote.records) == expected
    assert [r.rejected_reason for r in remote.records] == [None] * 24
    # one chunk per token, fewer only where the server's event loop fell behind its engine (chunks merged)
    assert all(1 <= len(r.token_times) <= r.output_tokens for r in remote.records)
    ours, theirs = summarize(local, SLO, 0.0), summarize(remote, SLO, math.nan)
    assert ours.keys() == theirs.keys()
    print("\nmetric        in-process   over HTTP")  # the latencies, reported (pytest -s)
    for name in ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "e2e_p99_s", "output_tok_s"):
        print(f"{name:<12} {ours[name]:>11.4f} {theirs[name]:>11.4f}")
        assert theirs[name] > 0 and math.isfinite(theirs[name])
    assert (theirs["completed"], theirs["slo_attainment"]) == (24.0, 1.0)
    assert math.isnan(theirs["kv_util_mean"])  # not seen from outside the server
    wait_idle(served)


def test_idle_gaps_are_skipped_while_no_request_is_open(served):
    sparse = (request("a", 0.0, 8, 4), request("b", 30.0, 8, 4, first_id=50), request("c", 60.0, 8, 4, first_id=90))
    result = http_replay(served.base_url, "tiny", sparse)
    assert result.busy_s < 5.0 and result.duration_s > 60.0
    assert [r.arrival for r in sorted(result.records, key=lambda r: r.request_id)] == [0.0, 30.0, 60.0]
    assert all(0 < r.first_token - r.arrival < 5.0 for r in result.records)


def test_a_stop_closes_the_open_streams_and_the_server_aborts_them(served):
    """Two short requests miss the SLO and decide the replay; the four long ones (100 steps more) are closed."""
    lengths = (4, 4, 110, 110, 110, 110)  # prompt 8 + 110 fits max_model_len 128
    reqs = tuple(request(f"s{i}", 0.0, 8, n, first_id=10 + 8 * i) for i, n in enumerate(lengths))
    result = http_replay(served.base_url, "tiny", reqs, slo=SloConfig(ttft_s=1e-6, tpot_s=1e-6), stop_after_misses=2)
    assert result.stopped and sorted(r.request_id for r in result.records) == ["s0", "s1"]
    wait_idle(served)


def test_a_request_the_server_refuses_is_a_rejection_with_its_message(served):
    [record] = http_replay(served.base_url, "tiny", (request("big", 0.0, 200, 4),)).records
    assert record.rejected_reason == "HTTP 400: prompt (200 tokens) + max_tokens (4) = 204 exceeds max_model_len 128"
    assert (record.output_tokens, record.first_token) == (0, None)


def test_the_executor_measures_the_endpoint_as_a_trial(served):
    executor = HttpExecutor(served.base_url + "/")
    assert executor.describe(CONFIG).summary == f"tiny at {served.base_url}"
    progress = []
    outcome = executor.run(job(tiny_runtime(), "search", slo=SLO, warmup=4), TRACE, lambda *p: progress.append(p),
                           lambda probe: True, timeout_s=60)
    assert outcome.status is TrialStatus.ok
    assert outcome.measurement.metrics["slo_attainment"] == 1.0
    assert outcome.measurement.values == (outcome.measurement.metrics["goodput_rps"],)
    assert progress[-1] == (1, 1.0, 24, 24)


def test_an_unreachable_endpoint_fails_the_trial_with_the_reason():
    outcome = HttpExecutor("http://127.0.0.1:9/v1").run(job(tiny_runtime(), "search"), TRACE, lambda *p: None,
                                                         lambda probe: True, timeout_s=10)
    assert outcome.status is TrialStatus.error
    assert outcome.reason.startswith("WorkerStartError: replay.target http://127.0.0.1:9/v1: GET /models failed")
