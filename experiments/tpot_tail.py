"""How much of azure-code's open-loop TPOT tail is the prefill attention's speed? The simulator's answer.

    python -m experiments.tpot_tail [--profile conf/profiles/h200-qwen2-7b.json] [--trace PATH]

The side-by-side bench (`bench_vs_vllm`) measures pagetune's TPOT p99 on azure-code above vLLM's while its p50 is
level or better. A decode row's TPOT tail is the steps it shares with prefill chunks, and the prefill attention is
where vLLM's FlashAttention 3 is faster (0.57-0.66 of the Triton kernel's time). This replays the bench's
azure-code open loop (its requests, lengths, seeds and rate) on the simulated engine at pagetune's defaults, with
the profile's prefill-attention coefficient as measured and scaled down (FA3's ratio among them), and the same with
the chunks' token coefficient scaled (what faster non-attention work in a chunk step would give), and prints TTFT
and TPOT p50 / p99 pooled over the bench's replays. A sensitivity, not a measurement: the profile's steps are the
real runtime's, its scaled coefficients a what-if.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from experiments.bench_vs_vllm import OPEN, bench_requests, latency_figures, open_loop_inputs, workload
from runtime import EngineConfig, VirtualClock, sim_engine
from runtime.sim.profile_file import GpuProfile, load_profile
from runtime.sim.stepmodel import FEATURES
from tuner.measure.replay import replay

ATTENTION, TOKENS = FEATURES.index("prefill_attention"), FEATURES.index("prefill_tokens")
WHAT_IFS = [("as profiled", 1.0, 1.0), ("prefill attention x0.8", 0.8, 1.0), ("prefill attention x0.63 (FA3's ratio)",
            0.63, 1.0), ("chunk tokens x0.95", 1.0, 0.95), ("both: attention x0.63, tokens x0.95", 0.63, 0.95)]


def scaled(profile: GpuProfile, attention: float, tokens: float) -> GpuProfile:
    """The profile with every variant's prefill-attention and prefill-token coefficients multiplied."""
    coefficients = {}
    for key, coef in profile.coefficients.items():
        c = list(coef)
        c[ATTENTION] *= attention
        c[TOKENS] *= tokens
        coefficients[key] = tuple(c)
    return replace(profile, coefficients=coefficients)


def open_loop_requests(trace: Path | None, vocab: int, repeats: int) -> list[list]:
    """The bench's azure-code open-loop replays: the same lengths, arrivals and seeds as `bench_vs_vllm`."""
    lens, replays = open_loop_inputs(workload("azure-code", trace), vocab, repeats)
    return [bench_requests(ps, [o for _, o in lens], at) for ps, at in replays]


def latencies(profile: GpuProfile, replays: list[list]) -> dict[str, float]:
    """TTFT and TPOT p50 / p99 pooled over the replays, on the simulated engine at pagetune's defaults."""
    config = EngineConfig.from_flat(profile.model, max_model_len=8192)
    ttft, tpot = [], []
    for reqs in replays:
        clock = VirtualClock()
        result = replay(sim_engine(config, profile, clock), clock, reqs)
        ttft += [r.first_token - r.arrival for r in result.records]
        tpot += [(r.finished - r.first_token) / (r.output_tokens - 1) for r in result.records if r.output_tokens > 1]
    return latency_figures(ttft, tpot)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", type=Path, default=Path("conf/profiles/h200-qwen2-7b.json"))
    ap.add_argument("--trace", type=Path, default=None)
    ap.add_argument("--repeats", type=int, default=2, help="open-loop replays, as the bench's --open-repeats")
    args = ap.parse_args()
    profile = load_profile(args.profile)
    replays = open_loop_requests(args.trace, profile.info.vocab_size, args.repeats)
    print(f"azure-code open loop, {len(replays)} x {len(replays[0])} requests at {OPEN['azure-code'][1]:g} req/s, "
          f"simulated on {args.profile} (pagetune's defaults)\n")
    print("| what-if | TTFT p50 / p99 s | TPOT p50 / p99 ms | TPOT p99 vs as profiled |\n|---|---|---|---|")
    base = None
    for name, attention, tokens in WHAT_IFS:
        f = latencies(scaled(profile, attention, tokens), replays)
        base = base or f["tpot_p99_s"]
        print(f"| {name} | {f['ttft_p50_s']:.3f} / {f['ttft_p99_s']:.3f} | {1e3 * f['tpot_p50_s']:.1f} / "
              f"{1e3 * f['tpot_p99_s']:.1f} | {100 * (f['tpot_p99_s'] / base - 1):+.1f}% |", flush=True)


if __name__ == "__main__":
    main()
