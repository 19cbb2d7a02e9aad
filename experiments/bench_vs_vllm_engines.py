"""The engines' half of bench_vs_vllm.py: one engine in this process (pagetune's runtime or vLLM), timed on
the workloads and written to OUT/ENGINE-MODEL.json. Each side uses its own engine's API: pagetune's
`LLMEngine` (offline: all requests added, then stepped; open loop: the tuner's replay) and vLLM's `AsyncLLM`
(offline: all requests submitted at once; open loop: each submitted at its arrival time, streamed)."""

from __future__ import annotations

import asyncio
import json
import platform
import time
from pathlib import Path
from typing import Any

import torch

from experiments.bench_vs_vllm import (
    MAX_LEN,
    OPEN,
    Streamed,
    bench_requests,
    latency_figures,
    open_loop_inputs,
    paired_rows,
    prompts,
    request_latencies,
    streamed_latencies,
    workload,
)
from kernels.compile_log import CompileLog
from runtime import CollectorPauses
from runtime.model.presets import preset_config


def run_child(args) -> None:
    knobs = json.loads(args.knobs)
    side = PagetuneSide(args.model, knobs, args.thawed_heap) if args.child == "pagetune" else VllmSide(args.model)
    result: dict[str, Any] = {"engine": args.child + (f"-{args.tag}" if args.tag else ""), "model": args.model,
                              "knobs": knobs, "start_s": side.start_s, "versions": side.versions(),
                              "gpu": torch.cuda.get_device_name(0), "host": platform.node(), "workloads": []}
    for name in args.workloads.split(","):
        w = workload(name, args.trace)
        row: dict[str, Any] = {"name": name, "requests": len(w.prompt_lens),
                               "prompt_tokens": sum(w.prompt_lens), "output_tokens": sum(w.output_lens)}
        first = side.offline(prompts(w.prompt_lens, side.vocab, 1), w.output_lens)
        warm = [side.offline(prompts(w.prompt_lens, side.vocab, 2 + k), w.output_lens) for k in range(2)]
        best = min(warm, key=lambda r: r["wall_s"])
        row.update(first_s=first["wall_s"], warm_s=[r["wall_s"] for r in warm],
                   first_tok_s=row["output_tokens"] / first["wall_s"], warm_tok_s=row["output_tokens"] / best["wall_s"],
                   graphs=best.get("graphs", {}), first_graphs=first.get("graphs", {}),
                   compiles={"first": first.get("compiles"), "warm": [r.get("compiles") for r in warm]})
        row["open"] = open_loops(side, name, w, args.open_repeats)
        print(json.dumps(row), flush=True)
        result["workloads"].append(row)
    side.close()
    path = args.out / f"{result['engine']}-{args.model}.json"
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {path}", flush=True)


def open_loops(side, name: str, w, repeats: int) -> dict[str, Any]:
    """`repeats` open-loop replays at the workload's rate, each on its own arrivals and token ids: the latency
    figures pooled over every replay's requests (a p99 of 160-200 requests is its second-largest value), and
    each replay's own, for the spread. None for 0 repeats (offline figures only)."""
    if repeats == 0:
        return {}
    lens, replays = open_loop_inputs(w, side.vocab, repeats)
    runs = [side.open_loop(ps, [o for _, o in lens], at) for ps, at in replays]
    pooled = latency_figures([x for r in runs for x in r.pop("ttft")], [x for r in runs for x in r.pop("tpot")])
    return {"rate": OPEN[name][1], "requests": len(lens) * repeats, **pooled, "lens": lens, "replays": runs}


# ---- pagetune --------------------------------------------------------------------------------------------
class StepEvents:
    """CUDA events around every step's forward, and the path each step took (`ModelRunner.paths`)."""

    def __init__(self, runner) -> None:
        self.rows: list[tuple[torch.cuda.Event, torch.cuda.Event, str]] = []
        inner = runner.execute

        def execute(*args):  # (scheduler output[, the previous step's tokens under async scheduling])
            before = dict(runner.paths)
            start = torch.cuda.Event(enable_timing=True)
            start.record()
            logits = inner(*args)
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            moved = [k for k, v in runner.paths.items() if v != before.get(k, 0)]
            self.rows.append((start, end, moved[0] if moved else "none"))
            return logits

        runner.execute = execute

    def summary(self) -> dict[str, Any]:
        torch.cuda.synchronize()
        rows, self.rows = self.rows, []
        if not rows:
            return {}
        busy: dict[str, float] = {}
        steps: dict[str, int] = {}
        for s, e, path in rows:
            busy[path] = busy.get(path, 0.0) + s.elapsed_time(e)
            steps[path] = steps.get(path, 0) + 1
        gaps = sum(rows[i][1].elapsed_time(rows[i + 1][0]) for i in range(len(rows) - 1))
        span = rows[0][0].elapsed_time(rows[-1][1])
        graphed = ("full graph", "piecewise")
        total_busy = sum(busy.values())
        return {"steps": steps, "busy_ms": busy, "span_ms": span, "idle_ms": gaps,
                "step_share": sum(steps.get(k, 0) for k in graphed) / len(rows),
                "time_share": sum(busy.get(k, 0.0) for k in graphed) / max(total_busy, 1e-9),
                "idle_share": gaps / max(span, 1e-9)}


class PagetuneSide:
    def __init__(self, model: str, knobs: dict[str, Any], thawed_heap: bool = False) -> None:
        from runtime import EngineConfig, LLMEngine, freeze_startup_heap
        from runtime.warmup import warm_up
        from tuner.measure.replay import ReplayClock

        t0 = time.perf_counter()
        self.clock = ReplayClock()
        self.engine = LLMEngine(EngineConfig.from_flat(model, max_model_len=MAX_LEN, **knobs), clock=self.clock)
        warm_up(self.engine)
        torch.cuda.synchronize()
        self.start_s = time.perf_counter() - t0
        if not thawed_heap:  # as the server's engine process does (and vLLM's engine core): one engine a process
            freeze_startup_heap()
        self.vocab = self.engine.vocab_size
        self.events = StepEvents(self.engine.runner)

    def versions(self) -> dict[str, str]:
        import triton

        return {"torch": torch.__version__, "triton": triton.__version__}

    def offline(self, ps: list[list[int]], outs: list[int]) -> dict[str, Any]:
        from runtime import RequestOutputKind, SamplingParams

        engine = self.engine
        engine.reset()
        self.events.summary()
        for i, (p, o) in enumerate(zip(ps, outs)):
            engine.add_request(f"r{i}", p, SamplingParams(max_tokens=o, temperature=0.0, ignore_eos=True,
                                                          output_kind=RequestOutputKind.FINAL_ONLY))
        torch.cuda.synchronize()
        t = time.perf_counter()
        done = 0
        with CompileLog() as log, CollectorPauses() as pauses:
            while engine.has_unfinished_requests():
                done += sum(len(o.outputs[0].token_ids) for o in engine.step() if o.finished)
        wall = time.perf_counter() - t
        assert done == sum(outs), f"generated {done} tokens, expected {sum(outs)}"
        return {"wall_s": wall, "graphs": self.events.summary(), "compiles": log.summary(), "gc": pauses.summary()}

    def open_loop(self, ps: list[list[int]], outs: list[int], at: list[float]) -> dict[str, Any]:
        from tuner.measure.replay import replay

        reqs = bench_requests(ps, outs, at)
        self.events.summary()
        with CompileLog() as log, CollectorPauses() as pauses:
            result = replay(self.engine, self.clock, reqs)
        return {**request_latencies(paired_rows(result.records, [q.request_id for q in reqs])),
                "skipped_idle_s": self.clock.skipped_s, "graphs": self.events.summary(), "compiles": log.summary(),
                "gc": pauses.summary()}

    def close(self) -> None:
        del self.engine


# ---- vLLM ------------------------------------------------------------------------------------------------
def model_dir(model: str) -> Path:
    """A folder holding only the preset's config.json: vLLM builds the model with random ('dummy') weights."""
    config = preset_config(model)
    data = json.loads(config.to_json_string())
    arch = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "mistral": "MistralForCausalLM"}
    data.update(architectures=[arch[config.model_type]], torch_dtype="bfloat16", dtype="bfloat16")
    rope = data.get("rope_parameters") or {}
    if "rope_theta" in rope:
        data.setdefault("rope_theta", rope["rope_theta"])
    folder = Path(f"/tmp/bench-model-{model}")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(data, indent=1))
    return folder


class VllmSide:
    def __init__(self, model: str) -> None:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        self.loop = asyncio.new_event_loop()
        t0 = time.perf_counter()
        args = AsyncEngineArgs(model=str(model_dir(model)), load_format="dummy", skip_tokenizer_init=True,
                               max_model_len=MAX_LEN, seed=0, dtype="bfloat16")
        self.engine = AsyncLLM.from_engine_args(args)
        self.start_s = time.perf_counter() - t0
        self.vocab = preset_config(model).vocab_size
        self.calls = 0

    def versions(self) -> dict[str, str]:
        import triton
        import vllm

        out = {"torch": torch.__version__, "triton": triton.__version__, "vllm": vllm.__version__}
        try:
            sched = self.engine.vllm_config.scheduler_config
            out.update(max_num_batched_tokens=str(sched.max_num_batched_tokens), max_num_seqs=str(sched.max_num_seqs))
        except AttributeError:
            pass
        return out

    def _params(self, max_tokens: int, delta: bool):
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        kind = RequestOutputKind.DELTA if delta else RequestOutputKind.FINAL_ONLY
        return SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True, detokenize=False,
                              output_kind=kind)

    def offline(self, ps: list[list[int]], outs: list[int]) -> dict[str, Any]:
        self.calls += 1
        call = self.calls

        async def one(i: int, p: list[int], o: int) -> int:
            last = None
            async for out in self.engine.generate(request_id=f"c{call}-{i}", prompt={"prompt_token_ids": p},
                                                  sampling_params=self._params(o, delta=False)):
                last = out
            return len(last.outputs[0].token_ids)

        async def run() -> list[int]:
            return await asyncio.gather(*(one(i, p, o) for i, (p, o) in enumerate(zip(ps, outs))))

        t = time.perf_counter()
        done = self.loop.run_until_complete(run())
        wall = time.perf_counter() - t
        assert sum(done) == sum(outs), f"generated {sum(done)} tokens, expected {sum(outs)}"
        return {"wall_s": wall}

    def open_loop(self, ps: list[list[int]], outs: list[int], at: list[float]) -> dict[str, Any]:
        self.calls += 1
        call = self.calls

        async def one(i: int, p: list[int], o: int, t0: float) -> Streamed:
            arrival = t0 + at[i]
            await asyncio.sleep(max(0.0, arrival - time.monotonic()))
            first, first_n, n, last = 0.0, 0, 0, None
            async for out in self.engine.generate(request_id=f"o{call}-{i}", prompt={"prompt_token_ids": p},
                                                  sampling_params=self._params(o, delta=True)):
                n += len(out.outputs[0].token_ids)
                if not first and n:
                    first, first_n = time.monotonic(), n
                last = out
            stats = getattr(last, "metrics", None)  # RequestStateStats (engine core stamps) unless stats are off
            return Streamed(arrival, first, time.monotonic(), n, first_n,
                            getattr(stats, "first_token_ts", 0.0), getattr(stats, "last_token_ts", 0.0))

        async def run() -> list[Streamed]:
            t0 = time.monotonic()  # the engine core stamps on this clock (CLOCK_MONOTONIC, one per machine)
            return await asyncio.gather(*(one(i, p, o, t0) for i, (p, o) in enumerate(zip(ps, outs))))

        return streamed_latencies(self.loop.run_until_complete(run()))

    def close(self) -> None:
        self.engine.shutdown()
