"""pagetune's runtime against vLLM on the same GPU, in the same call: each engine in a process of its own,
one after the other (each alone on the GPU), on the same prompts.

Per engine and model: engine start (construction to ready, warm-up and graph capture included), then per
workload
    first   the workload's requests, all submitted at once, on the fresh engine
    warm    the same lengths with other token ids (a prefix cache cannot hit), best of two runs
    open    open-loop replays at a fixed arrival rate (Poisson, seeded; `--open-repeats`, other arrivals and
            token ids each): TTFT and TPOT p50 / p99 over all their requests, and each replay's own; vLLM's from
            its engine core's stamps, as pagetune's replay stamps its own (the client's beside them:
            `streamed_latencies`); every request's pair kept, so the engines' requests pair up (`paired_notes`)
Output tokens/s is the figure; every request generates exactly its output length (greedy, EOS ignored).
For pagetune it also reports graph coverage (the share of steps, and of their GPU time, that replayed a
graph: full decode graphs or piecewise ones) and the GPU's idle share between steps (CUDA events around
each step's forward: the time from one step's last launched kernel to the next step's first, over the run).

Workloads (random bf16 weights, `load_format="dummy"` for vLLM):
    uniform     Llama-3-8B shape, 256 requests, prompt 512, output 256 (ANCHORS.md)
    mixed       Llama-3-8B shape, 256 requests, prompt U[64, 2048), output U[32, 512) (ANCHORS.md)
    azure-code  Qwen2-7B shape, 192 requests with (prompt, output) lengths drawn from the Azure LLM code
                trace (azure_llm_2023_code.csv: ../shared/traces, or --trace), prompt + output <= 8192

    python -m experiments.bench_vs_vllm --out DIR      # all three, each on its model, both engines
    python -m experiments.bench_vs_vllm --model llama-3-8b --workloads uniform,mixed --out DIR
    python -m experiments.bench_vs_vllm --model qwen2-7b --workloads azure-code --trace .traces/azure.csv --out DIR
    python -m experiments.bench_vs_vllm --table --out DIR  # the table of results already there (CPU)

The parent imports neither engine; `--child ENGINE` is one engine's process, writing DIR/ENGINE-MODEL.json.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np

HERE = Path(__file__).resolve().parent
MAX_LEN = 8192
OPEN = {"uniform": (200, 16.0), "mixed": (200, 8.0), "azure-code": (160, 6.0)}  # requests, arrival rate req/s
MODEL_OF = {"uniform": "llama-3-8b", "mixed": "llama-3-8b", "azure-code": "qwen2-7b"}  # each workload's own shape


class Workload(NamedTuple):
    name: str
    prompt_lens: list[int]
    output_lens: list[int]


def workload(name: str, trace: Path | None, seed: int = 0) -> Workload:
    rng = np.random.default_rng(seed)
    if name == "uniform":
        return Workload(name, [512] * 256, [256] * 256)
    if name == "mixed":
        return Workload(name, rng.integers(64, 2048, 256).tolist(), rng.integers(32, 512, 256).tolist())
    if name == "azure-code":
        pairs = azure_lengths(trace)
        pick = rng.choice(len(pairs), 192, replace=False)
        return Workload(name, [pairs[i][0] for i in pick], [pairs[i][1] for i in pick])
    raise SystemExit(f"unknown workload {name!r}: uniform, mixed or azure-code")


def azure_lengths(trace: Path | None) -> list[tuple[int, int]]:
    path = trace or HERE.parent.parent / "shared" / "traces" / "azure_llm_2023_code.csv"
    with open(path, newline="") as f:
        rows = [(int(r["ContextTokens"]), int(r["GeneratedTokens"])) for r in csv.DictReader(f)]
    return [(p, o) for p, o in rows if p >= 1 and o >= 1 and p + o <= MAX_LEN]


def prompts(lens: list[int], vocab: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(10, vocab - 10, n).tolist() for n in lens]


def arrivals(n: int, rate: float, seed: int) -> list[float]:
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, n)
    return (np.cumsum(gaps) - gaps[0]).tolist()


def latency_figures(ttft: list[float], tpot: list[float]) -> dict[str, float]:
    return {"ttft_p50_s": float(np.percentile(ttft, 50)), "ttft_p99_s": float(np.percentile(ttft, 99)),
            "tpot_p50_s": float(np.percentile(tpot, 50)), "tpot_p99_s": float(np.percentile(tpot, 99))}


def latency_rows(stamps) -> list[list[float | None]]:
    """(arrival, first token, last token, tokens) per request -> [TTFT, TPOT or None (one token)] per request."""
    return [[f - a, (e - f) / (n - 1) if n > 1 else None] for a, f, e, n in stamps]


def split_latencies(per_request: list[list[float | None]]) -> tuple[list[float], list[float]]:
    """`latency_rows` as the TTFT list and the TPOT list (requests of one token have none)."""
    return [r[0] for r in per_request], [r[1] for r in per_request if r[1] is not None]


def request_latencies(per_request: list[list[float | None]]) -> dict:
    """A replay's figures from its `latency_rows`: p50 / p99, the TTFT and TPOT lists (pooled over replays by
    `open_loops`), the five longest TTFTs and the rows themselves (kept, to pair the engines' requests)."""
    ttft, tpot = split_latencies(per_request)
    return {**latency_figures(ttft, tpot), "ttft": ttft, "tpot": tpot, "ttft_top_s": sorted(ttft)[-5:],
            "per_request": per_request}


def open_loop_inputs(w: Workload, vocab: int, repeats: int) -> tuple[list[tuple[int, int]], list[tuple]]:
    """The workload's open-loop replays: (prompt, output) lengths of its OPEN[...] requests, and per replay its
    prompts and arrivals (other token ids and arrivals each, seeded): the same for every engine and the simulator."""
    n, rate = OPEN[w.name]
    lens = [(w.prompt_lens[i % len(w.prompt_lens)], w.output_lens[i % len(w.output_lens)]) for i in range(n)]
    return lens, [(prompts([p for p, _ in lens], vocab, 5 + 10 * k), arrivals(n, rate, 7 + 10 * k))
                  for k in range(repeats)]


def bench_requests(ps: list[list[int]], outs: list[int], at: list[float]) -> list:
    """One open-loop replay as the tuner's replay takes it (`tuner.traffic.TrafficRequest`, ids o0, o1, ...)."""
    from tuner.traffic import TrafficRequest

    return [TrafficRequest(f"o{i}", a, tuple(p), o, f"bench:{i}") for i, (p, o, a) in enumerate(zip(ps, outs, at))]


def paired_rows(records, order: list[str]) -> list[list[float | None]]:
    """pagetune's replay records (`tuner.measure.timeline.RequestRecord`, in finishing order) as [TTFT, TPOT or
    None] per request in `order` (the ids in arrival order), to pair with vLLM's side request by request."""
    by_id = {r.request_id: r for r in records}
    return latency_rows((r.arrival, r.first_token, r.finished, r.output_tokens) for r in (by_id[i] for i in order))


class Streamed(NamedTuple):
    """One open-loop request on vLLM, on the monotonic clock: as its client saw it, and as the engine core stamped
    it (`RequestOutput.metrics`, vLLM's RequestStateStats: the time each step's outputs left the engine core)."""

    arrival: float
    client_first: float  # the first delta received by the client
    client_end: float  # the last
    tokens: int
    first_delta_tokens: int  # tokens in the first delta: more than 1 where vLLM merged deltas the client had not taken
    engine_first: float  # first_token_ts; 0.0 where vLLM kept no stats
    engine_last: float  # last_token_ts


def streamed_latencies(rows: list[Streamed]) -> dict:
    """TTFT and TPOT of vLLM's open loop from the engine core's stamps, as pagetune's replay stamps its own (the
    host time each step's tokens arrive); the client's figures beside them. Why not the client's: a delta the
    client has not yet taken is merged with the next (vLLM's RequestOutputCollector), so a busy client stamps a
    first token late and the tokens after it close together, which shortens TPOT. Client stamps only where no row
    has engine stamps (vLLM without stats)."""
    engine = all(r.engine_first > 0.0 for r in rows)
    stamps = [(r.arrival, r.engine_first, r.engine_last, r.tokens) if engine else
              (r.arrival, r.client_first, r.client_end, r.tokens) for r in rows]
    client = split_latencies(latency_rows((r.arrival, r.client_first, r.client_end, r.tokens) for r in rows))
    return {**request_latencies(latency_rows(stamps)), "stamps": "engine" if engine else "client",
            "client": latency_figures(*client),
            "first_delta_merged": sum(r.first_delta_tokens > 1 for r in rows)}


# ---- the parent ------------------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="run every workload on this model (default: each on its own: "
                    + ", ".join(f"{w} on {m}" for w, m in MODEL_OF.items()) + ")")
    ap.add_argument("--workloads", default=",".join(MODEL_OF))
    ap.add_argument("--engines", default="pagetune,vllm")
    ap.add_argument("--trace", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=Path("bench-vs-vllm"))
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--knobs", default="{}", help="pagetune engine knobs as JSON (e.g. '{\"cuda_graphs\": false}')")
    ap.add_argument("--tag", default="", help="a suffix for this run's result file (variants of one engine)")
    ap.add_argument("--open-repeats", type=int, default=1,
                    help="open-loop replays per workload (other arrivals and token ids each); p50/p99 pooled; 0: none")
    ap.add_argument("--thawed-heap", action="store_true",
                    help="pagetune's startup heap left to the collector (by default frozen once warm, as served)")
    ap.add_argument("--table", action="store_true", help="print the table of the results in --out; run nothing")
    args = ap.parse_args()
    if args.table:
        print(table(args.out))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    if args.child:
        from experiments.bench_vs_vllm_engines import run_child  # imports the engine only in its own process

        run_child(args)
        return
    for model, names in by_model(args.workloads.split(","), args.model).items():
        for engine in args.engines.split(","):  # each engine alone on the GPU, one after the other
            cmd = [sys.executable, "-m", "experiments.bench_vs_vllm", *sys.argv[1:], "--child", engine,
                   "--model", model, "--workloads", ",".join(names)]  # the last of a repeated option wins
            print(f"== {engine} on {model}: {','.join(names)}", flush=True)
            code = subprocess.call(cmd, env={**os.environ, "PYTHONUNBUFFERED": "1"})
            if code:
                print(f"!! {engine} exited with code {code}", flush=True)
    print(table(args.out))


def by_model(names: list[str], model: str | None) -> dict[str, list[str]]:
    """The workloads grouped by the model each runs on (`model` for all of them when given), in their order."""
    unknown = [n for n in names if n not in MODEL_OF]
    if unknown:
        raise SystemExit(f"unknown workload {unknown[0]!r}: {', '.join(MODEL_OF)}")
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(model or MODEL_OF[name], []).append(name)
    return groups


def table(out: Path) -> str:
    rows = ["| engine | model | workload | start s | first tok/s | warm tok/s | first/warm | open rate req/s | "
            "TTFT p50/p99 (p99 per replay) s | TPOT p50/p99 ms | graph steps | graph GPU time | GPU idle |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    results = [json.loads(path.read_text()) for path in sorted(out.glob("*.json"))
               if path.name.startswith(("pagetune-", "vllm-"))]  # each engine's child writes ENGINE-MODEL.json
    for r in results:
        for w in r["workloads"]:
            o, g = w.get("open", {}), w.get("graphs", {})
            rows.append(
                f"| {r['engine']} | {r['model']} | {w['name']} | {r['start_s']:.0f} | {w['first_tok_s']:,.0f} | "
                f"{w['warm_tok_s']:,.0f} | {w['first_tok_s'] / w['warm_tok_s']:.2f} | {o.get('rate', 0):g} | "
                f"{o.get('ttft_p50_s', float('nan')):.3f} / {o.get('ttft_p99_s', float('nan')):.3f}"
                f"{_spread(o, 'ttft_p99_s', 1, '.3f')} | "
                f"{1e3 * o.get('tpot_p50_s', float('nan')):.1f} / {1e3 * o.get('tpot_p99_s', float('nan')):.1f}"
                f"{_spread(o, 'tpot_p99_s', 1e3, '.1f')} | "
                f"{_share(g, 'step_share', '.0%')} | {_share(g, 'time_share', '.0%')} | "
                f"{_share(g, 'idle_share', '.1%')} |")
    return "\n".join(rows + ratios(results) + client_notes(results) + gc_notes(results) + paired_notes(results))


def ratios(results: list[dict]) -> list[str]:
    """pagetune's warm throughput over vLLM's, per workload both engines ran on the same model (each pagetune
    variant, `--tag`, on its own line)."""
    warm = {(r["engine"], r["model"], w["name"]): w["warm_tok_s"] for r in results for w in r["workloads"]}
    return [f"{name} on {model}: {engine} / vLLM warm {tok_s / warm[('vllm', model, name)]:.2f}x"
            for (engine, model, name), tok_s in warm.items()
            if engine.startswith("pagetune") and ("vllm", model, name) in warm]


def client_notes(results: list[dict]) -> list[str]:
    """Per vLLM workload, which stamps its latencies are (`streamed_latencies`) and what its client saw."""
    notes = []
    for r in results:
        for w in r["workloads"]:
            replays = [x for x in w.get("open", {}).get("replays", []) if "client" in x]
            if r["engine"] != "vllm" or not replays:
                continue
            c = [x["client"] for x in replays]
            notes.append(
                f"{w['name']} on vLLM: {replays[0]['stamps']} stamps; its client per replay: TTFT p99 "
                + ", ".join(f"{x['ttft_p99_s']:.3f}" for x in c) + " s, TPOT p99 "
                + ", ".join(f"{1e3 * x['tpot_p99_s']:.1f}" for x in c) + " ms; first deltas merged "
                + ", ".join(str(x["first_delta_merged"]) for x in replays))
    return notes


def gc_notes(results: list[dict]) -> list[str]:
    """Per pagetune open loop, the collections Python ran during each replay: a full one pauses every step."""
    notes = []
    for r in results:
        for w in r["workloads"]:
            runs = [x["gc"] for x in w.get("open", {}).get("replays", []) if "gc" in x]
            if runs:
                notes.append(f"{w['name']} on {r['engine']}: collections per replay "
                             + ", ".join(f"{x['collections']} ({x['full']} full)" for x in runs) + ", the longest "
                             + ", ".join(f"{x['longest_ms']:.1f}" for x in runs) + " ms")
    return notes


def paired_notes(results: list[dict], top: int = 4) -> list[str]:
    """Both engines replay the same arrivals and lengths, so their requests pair up: per workload, the share of
    requests whose TPOT pagetune makes longer, and pagetune's `top` longest TPOTs beside vLLM's for the same
    requests (output tokens, both TPOTs in ms): where a tail comes from."""
    opened = {(r["engine"], r["model"], w["name"]): w["open"] for r in results for w in r["workloads"]
              if w.get("open", {}).get("replays") and "per_request" in w["open"]["replays"][0]}
    notes = []
    for (engine, model, name), mine in opened.items():
        theirs = opened.get(("vllm", model, name))
        if not engine.startswith("pagetune") or theirs is None:
            continue
        pairs = [(mine["lens"][i][1], a[1], b[1])
                 for ra, rb in zip(mine["replays"], theirs["replays"])
                 for i, (a, b) in enumerate(zip(ra["per_request"], rb["per_request"])) if a[1] is not None]
        longer = sum(a > b for _, a, b in pairs)
        worst = sorted(pairs, key=lambda x: -x[1])[:top]
        notes.append(f"{name} TPOT, paired requests: {engine} longer on {longer} of {len(pairs)}; its longest "
                     + ", ".join(f"{1e3 * a:.1f} vs {1e3 * b:.1f} ms ({n} out)" for n, a, b in worst))
        notes.append(f"{name} p99, {engine} / vLLM on paired requests (95% bootstrap interval): "
                     + ", ".join(f"{label} {ratio:.2f} ({lo:.2f}-{hi:.2f})" for label, (ratio, lo, hi) in
                                 (("TTFT", p99_ratio(mine, theirs, 0)), ("TPOT", p99_ratio(mine, theirs, 1)))))
    return notes


def p99_ratio(mine: dict, theirs: dict, column: int, draws: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """pagetune's p99 over vLLM's for one latency column of the paired requests (0 TTFT, 1 TPOT; a request that
    either engine gives no value is left out), and a 95% percentile-bootstrap interval: each replay's requests
    drawn with replacement, the same draws for both engines (a request's arrival luck stays paired), pooled.
    With a few hundred requests a p99 rests on the few longest, which the interval shows."""
    rng = np.random.default_rng(seed)
    a_parts, b_parts, draw_parts = [], [], []
    for ra, rb in zip(mine["replays"], theirs["replays"]):
        kept = [(x[column], y[column]) for x, y in zip(ra["per_request"], rb["per_request"])
                if x[column] is not None and y[column] is not None]
        a, b = np.array(kept).T
        a_parts.append(a)
        b_parts.append(b)
        draw_parts.append((rng.integers(0, len(a), (draws, len(a))), a, b))
    ratio = np.percentile(np.concatenate(a_parts), 99) / np.percentile(np.concatenate(b_parts), 99)
    a_draws = np.concatenate([a[idx] for idx, a, _ in draw_parts], axis=1)
    b_draws = np.concatenate([b[idx] for idx, _, b in draw_parts], axis=1)
    ratios = np.percentile(a_draws, 99, axis=1) / np.percentile(b_draws, 99, axis=1)
    lo, hi = np.percentile(ratios, [2.5, 97.5])
    return float(ratio), float(lo), float(hi)


def _share(graphs: dict, key: str, fmt: str) -> str:
    """A graph-coverage figure, or "-" for an engine that reports none (vLLM's steps are not timed here)."""
    return f"{graphs[key]:{fmt}}" if key in graphs else "-"


def _spread(o: dict, key: str, scale: float, fmt: str) -> str:
    """The range of `key` over the open-loop replays, where there were several."""
    values = [scale * r[key] for r in o.get("replays", [])]
    return f" ({min(values):{fmt}}-{max(values):{fmt}})" if len(values) > 1 else ""


if __name__ == "__main__":
    main()
