"""Where the GPU's time goes in the steps of a real workload: bench_vs_vllm's workload on pagetune's engine (its
defaults: CUDA graphs, async scheduling), a few ranges of its steps under torch.profiler.

    python -m experiments.profile_workload --model qwen2-7b --workload azure-code --trace T --steps 20:30,500:520

The workload runs once to warm up, then again (other token ids) with the chosen step ranges profiled. Per range
it prints the steps' composition (decode rows, prefill tokens, chunks, longest context), their wall time, the
GPU's span per step (first kernel's start to last kernel's end, over the steps after the first: `steady`), the
kernels' busy time by kind, and the idle gaps inside the span: their sum and the longest, each with the kernels
on either side and what the host was doing while the GPU waited (the CPU ops between the gap's start and the
launch of the kernel after it). The Chrome trace of each range is written to OUT (gzipped) for a closer look.
Measured on an H100 (RESULTS.md): azure-code's prefill steps are kernel-bound, their attention 15-17% of them.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from experiments.bench_vs_vllm import prompts, workload
from experiments.bench_vs_vllm_engines import PagetuneSide
from experiments.profile_step import kind_of

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


class Interval(NamedTuple):
    start: float  # µs
    end: float
    name: str


class Gap(NamedTuple):
    start: float
    end: float
    before: str
    after: str
    host: list[tuple[str, float]]  # (CPU op, µs of it inside the wait)


def composition(out: Any) -> dict[str, int]:
    """A scheduled step's shape: decode rows, prefill tokens and chunks, the longest context."""
    decodes = [s for s in out.scheduled if s.num_new_tokens == 1]
    chunks = [s for s in out.scheduled if s.num_new_tokens > 1]
    return {"decode_rows": len(decodes), "prefill_tokens": sum(s.num_new_tokens for s in chunks),
            "chunks": len(chunks), "max_context": max((s.start + s.num_new_tokens for s in out.scheduled), default=0)}


def gpu_intervals(events: list[dict]) -> list[Interval]:
    return sorted(Interval(e["ts"], e["ts"] + e.get("dur", 0), e["name"]) for e in events
                  if e.get("cat") in GPU_CATS and e.get("ph") == "X")


def merged_busy(gpu: list[Interval]) -> list[tuple[float, float]]:
    spans: list[list[float]] = []
    for iv in gpu:
        if spans and iv.start <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], iv.end)
        else:
            spans.append([iv.start, iv.end])
    return [(a, b) for a, b in spans]


def launches(events: list[dict]) -> dict[Any, float]:
    """A GPU event's correlation id -> the host time its launch (cuda_runtime event) started."""
    return {e["args"]["correlation"]: e["ts"] for e in events
            if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}


def host_ops(events: list[dict], start: float, end: float, top: int = 4) -> list[tuple[str, float]]:
    """The CPU ops and annotations overlapping [start, end], by their time inside it (outermost ones last)."""
    inside: dict[str, float] = {}
    for e in events:
        if e.get("cat") not in ("cpu_op", "user_annotation", "python_function") or e.get("ph") != "X":
            continue
        a, b = max(e["ts"], start), min(e["ts"] + e.get("dur", 0), end)
        if b > a:
            inside[e["name"]] = inside.get(e["name"], 0.0) + (b - a)
    return sorted(inside.items(), key=lambda kv: kv[1])[:top]


def gaps(events: list[dict], min_us: float = 20.0) -> tuple[float, float, list[Gap]]:
    """The GPU's span, its idle time inside the span, and every gap of at least `min_us` µs."""
    gpu = gpu_intervals(events)
    if not gpu:
        return 0.0, 0.0, []
    busy = merged_busy(gpu)
    span = busy[-1][1] - busy[0][0]
    idle = span - sum(b - a for a, b in busy)
    launch_at = launches(events)
    by_start = {(e["ts"]): e for e in events if e.get("cat") in GPU_CATS and e.get("ph") == "X"}
    found: list[Gap] = []
    for (_, end), (nxt, _) in itertools.pairwise(busy):
        if nxt - end < min_us:
            continue
        before = max((iv for iv in gpu if iv.end <= end + 1e-3), key=lambda iv: iv.end).name
        after_event = by_start.get(nxt, {})
        launched = launch_at.get(after_event.get("args", {}).get("correlation"), nxt)
        found.append(Gap(end, nxt, before, after_event.get("name", "?"), host_ops(events, end, min(launched, nxt))))
    return span, idle, found


def steady(events: list[dict]) -> list[dict]:
    """The events after the first step's sampled tokens leave for the host (its first device-to-host copy): the
    profiler starts on an idle device, so the first step's launches overlap nothing, which no step of the run
    itself sees; the span and idle time are taken over the steps after it."""
    copies = [e["ts"] for e in events if e.get("cat") == "gpu_memcpy" and "DtoH" in e.get("name", "")]
    if not copies:
        return events
    first = min(copies)
    return [e for e in events if e.get("cat") not in GPU_CATS or e["ts"] > first]


def profiled_range(engine: Any, first: int, last: int, out: Path, cpu: bool) -> dict[str, Any]:
    """Steps first..last-1 of the running workload under the profiler (the caller has stepped to `first`)."""
    activities = [ProfilerActivity.CUDA] + ([ProfilerActivity.CPU] if cpu else [])
    torch.cuda.synchronize()
    with profile(activities=activities) as prof:
        t = time.perf_counter()
        for i in range(first, last):
            with record_function(f"step {i}"):
                engine.step()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t) * 1e3
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(raw))
        data = raw.read_bytes()
    tag = f"steps-{first}-{last}" + ("-cpu" if cpu else "")
    (out / f"trace-{tag}.json.gz").write_bytes(gzip.compress(data))
    events = json.loads(data)["traceEvents"]
    steps = last - first
    span, idle, found = gaps(steady(events))
    by_kind: dict[str, float] = {}
    for iv in gpu_intervals(events):
        by_kind[kind_of(iv.name)] = by_kind.get(kind_of(iv.name), 0.0) + (iv.end - iv.start) / 1e3 / steps
    return {"range": [first, last], "cpu_trace": cpu, "wall_ms_per_step": wall / steps,
            "gpu_span_ms_per_step": span / 1e3 / (steps - 1), "gpu_idle_ms_per_step": idle / 1e3 / (steps - 1),
            "kernel_ms_per_step": dict(sorted(by_kind.items(), key=lambda kv: -kv[1])),
            "gaps": [{"ms": (g.end - g.start) / 1e3, "before": g.before[:60], "after": g.after[:60],
                      "host": [(n[:60], round(us / 1e3, 3)) for n, us in g.host]}
                     for g in sorted(found, key=lambda g: g.start - g.end)[:12]]}


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    from runtime import RequestOutputKind, SamplingParams

    side = PagetuneSide(args.model, json.loads(args.knobs))
    w = workload(args.workload, args.trace)
    side.offline(prompts(w.prompt_lens, side.vocab, 2), w.output_lens)  # warm
    engine = side.engine
    shapes: list[dict[str, int]] = []
    inner = engine.runner.execute

    def execute(out, *rest):
        shapes.append(composition(out))
        return inner(out, *rest)

    engine.runner.execute = execute
    engine.reset()
    for i, (p, o) in enumerate(zip(prompts(w.prompt_lens, side.vocab, 3), w.output_lens)):
        engine.add_request(f"r{i}", p, SamplingParams(max_tokens=o, temperature=0.0, ignore_eos=True,
                                                      output_kind=RequestOutputKind.FINAL_ONLY))
    ranges = sorted(tuple(int(x) for x in r.split(":")) for r in args.steps.split(","))
    results, step = [], 0
    for first, last in ranges:
        while step < first and engine.has_unfinished_requests():
            engine.step()
            step += 1
        if not engine.has_unfinished_requests():
            break
        for cpu in (False, True):
            n = min(last - first, args.cpu_steps) if cpu else last - first
            before = len(shapes)
            row = profiled_range(engine, step, step + n, args.out, cpu)
            row["shapes"] = shapes[before:]
            step += n
            print(json.dumps(row), flush=True)
            results.append(row)
    while engine.has_unfinished_requests():
        engine.step()
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2-7b")
    ap.add_argument("--workload", default="azure-code")
    ap.add_argument("--trace", type=Path, default=None)
    ap.add_argument("--steps", default="20:30,600:620", help="ranges of step indices to profile, FIRST:LAST,...")
    ap.add_argument("--cpu-steps", type=int, default=4, help="steps of each range profiled again with CPU ops")
    ap.add_argument("--knobs", default="{}", help="pagetune engine knobs as JSON")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")) / "profile-workload")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = run(args)
    (args.out / f"profile-{args.model}-{args.workload}.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
