"""`/metrics` in the Prometheus text format (0.0.4), written here: no client library needed.

Names follow vLLM's (`vllm:time_to_first_token_seconds` is `pagetune:time_to_first_token_seconds`), so
dashboards built for one read the other. Histograms are observed when a request finishes (from the
`Timing` its engine step sent); gauges are read from the engine's last step when scraped.

    pagetune:time_to_first_token_seconds     histogram  first token - arrival
    pagetune:time_per_output_token_seconds   histogram  (finish - first token) / (tokens - 1), n > 1
    pagetune:e2e_request_latency_seconds     histogram  finish - arrival
    pagetune:num_requests_running            gauge      sequences in the running batch
    pagetune:num_requests_waiting            gauge      sequences waiting (swapped ones included)
    pagetune:kv_cache_usage_perc             gauge      share of KV blocks in use, 0..1
    pagetune:num_preemptions_total           counter    sequences preempted since start
    pagetune:prompt_tokens_total, pagetune:generation_tokens_total, pagetune:request_success_total  counters
"""

from __future__ import annotations

import bisect
import threading

from runtime.serve.engine_core import Timing
from runtime.stats import StepStats

__all__ = ["Histogram", "ServerMetrics"]

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
TPOT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
E2E_BUCKETS = (0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)


class Histogram:
    """Cumulative buckets as Prometheus counts them (`le`: less than or equal), a sum and a count."""

    def __init__(self, name: str, help_text: str, buckets: tuple[float, ...]) -> None:
        self.name, self.help, self.buckets = name, help_text, buckets
        self.counts = [0] * (len(buckets) + 1)  # the last one is +Inf
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value
        self.count += 1

    def lines(self) -> list[str]:
        out = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        running = 0
        for bound, n in zip([*map(repr, self.buckets), "+Inf"], self.counts):
            running += n
            out.append(f'{self.name}_bucket{{le="{bound}"}} {running}')
        return [*out, f"{self.name}_sum {self.sum!r}", f"{self.name}_count {self.count}"]


class ServerMetrics:
    def __init__(self) -> None:
        self.ttft = Histogram("pagetune:time_to_first_token_seconds", "Time to first token.", TTFT_BUCKETS)
        self.tpot = Histogram("pagetune:time_per_output_token_seconds", "Mean time per output token after the "
                              "first.", TPOT_BUCKETS)
        self.e2e = Histogram("pagetune:e2e_request_latency_seconds", "End-to-end request latency.", E2E_BUCKETS)
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.successes = 0
        self._lock = threading.Lock()  # observed by the engine handle's thread, read by the event loop

    def observe(self, t: Timing) -> None:
        """A finished request's latencies (requests that never produced a token are not observed)."""
        if t.first_token_time is None or t.finished_time is None:
            return
        n = t.output_tokens
        with self._lock:
            self.ttft.observe(t.first_token_time - t.arrival_time)
            if n > 1:
                self.tpot.observe((t.finished_time - t.first_token_time) / (n - 1))
            self.e2e.observe(t.finished_time - t.arrival_time)
            self.prompt_tokens += t.prompt_tokens
            self.generation_tokens += n
            self.successes += 1

    def render(self, step: StepStats | None, preempted: int) -> str:
        """The exposition text: histograms and counters, and gauges from the engine's last step."""
        running, waiting = (step.num_running, step.num_waiting + step.num_swapped) if step else (0, 0)
        usage = step.kv_used_blocks / max(1, step.kv_total_blocks) if step else 0.0
        with self._lock:
            lines = [*self.ttft.lines(), *self.tpot.lines(), *self.e2e.lines()]
            counters = (("prompt_tokens_total", "Prompt tokens of finished requests.", self.prompt_tokens),
                        ("generation_tokens_total", "Generated tokens of finished requests.", self.generation_tokens),
                        ("request_success_total", "Requests finished (stop or length).", self.successes))
        gauges = (("num_requests_running", "Sequences in the running batch.", running),
                  ("num_requests_waiting", "Sequences waiting to run (swapped included).", waiting),
                  ("kv_cache_usage_perc", "Share of KV-cache blocks in use (1 = full).", usage))
        for name, help_text, value in gauges:
            lines += _sample(f"pagetune:{name}", help_text, "gauge", value)
        lines += _sample("pagetune:num_preemptions_total", "Sequences preempted since start.", "counter", preempted)
        for name, help_text, value in counters:
            lines += _sample(f"pagetune:{name}", help_text, "counter", value)
        return "\n".join(lines) + "\n"


def _sample(name: str, help_text: str, kind: str, value: float) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name} {value!r}"]
