"""Synthetic traffic in pagetune's native JSONL, from a seed: the project's sample and test traffic.

    python -m tuner.traffic.synth --out traffic.jsonl --requests 500 --rate 4 --seed 1 \\
        --arrival gamma --burstiness 2 --prefix-groups 4 --prefix-share 0.6

- Arrivals: gaps between requests are exponential (`poisson`) or gamma-distributed (`gamma`) with a
  coefficient of variation `burstiness` (1 is Poisson, above 1 burstier, below 1 more regular), at a
  mean `rate` req/s. The first request is at 0.0; timestamps are rounded to milliseconds.
- Lengths (prompt and output separately): `lognormal` (median, sigma) rounded and clipped to
  [min, max], or `uniform` integers in [min, max].
- Shared prefixes: `prefix_groups` groups, each with a prefix length drawn uniformly from
  [prefix_min, prefix_max]; each request joins a random group with probability `prefix_share`
  (written as `prefix_id` + `prefix_tokens`). A request in a group is at least one token longer
  than its prefix, so every prompt keeps a part of its own.

Randomness is numpy's PCG64 `Generator` seeded with `seed`, so one seed gives one file, byte for byte
(tests/tuner/traffic/test_synth.py regenerates the shipped sample to prove it).
"""

from __future__ import annotations

import argparse
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tuner.traffic.requests import MAX_TOKENS


class SynthError(ValueError):
    """A generator setting is wrong; the message names the command-line flag."""


def _check(ok: bool, flag: str, message: str) -> None:
    if not ok:
        raise SynthError(f"--{flag}: {message}")


@dataclass(frozen=True)
class LengthDist:
    kind: str = "lognormal"  # lognormal | uniform
    median: float = 64.0  # lognormal: the median length before clipping
    sigma: float = 0.8  # lognormal: standard deviation of log(length)
    low: int = 1  # clip floor (lognormal) or smallest value (uniform)
    high: int = 1024  # clip ceiling (lognormal) or largest value (uniform)

    def validate(self, name: str) -> None:
        _check(self.kind in ("lognormal", "uniform"), f"{name}-dist",
               f"must be lognormal or uniform, got {self.kind!r}")
        _check(math.isfinite(self.median) and self.median > 0, f"{name}-median",
               f"must be > 0, got {self.median}")
        _check(math.isfinite(self.sigma) and self.sigma >= 0, f"{name}-sigma",
               f"must be >= 0, got {self.sigma}")
        _check(1 <= self.low <= MAX_TOKENS, f"{name}-min", f"must be in [1, {MAX_TOKENS}], got {self.low}")
        _check(self.low <= self.high <= MAX_TOKENS, f"{name}-max",
               f"must be in [{name}-min, {MAX_TOKENS}], got {self.high}")

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """[n] int64 lengths."""
        if self.kind == "uniform":
            return rng.integers(self.low, self.high + 1, size=n)
        raw = rng.lognormal(math.log(self.median), self.sigma, size=n)
        return np.clip(np.rint(raw), self.low, self.high).astype(np.int64)


@dataclass(frozen=True)
class SynthSpec:
    requests: int  # how many requests
    rate: float  # mean arrival rate, requests per second
    seed: int = 0
    arrival: str = "poisson"  # poisson | gamma
    burstiness: float = 1.0  # gamma: coefficient of variation of the gaps (1 = Poisson)
    prompt: LengthDist = field(default_factory=LengthDist)
    output: LengthDist = field(default_factory=lambda: LengthDist(median=32.0, high=256))
    prefix_groups: int = 0  # number of shared-prefix groups; 0: every prompt is unique
    prefix_share: float = 0.0  # probability that a request starts with a group's prefix
    prefix_low: int = 16  # shortest group prefix, tokens
    prefix_high: int = 64  # longest group prefix, tokens

    def __post_init__(self) -> None:
        _check(1 <= self.requests <= 10_000_000, "requests", f"must be in [1, 10000000], got {self.requests}")
        _check(math.isfinite(self.rate) and self.rate > 0, "rate", f"must be > 0, got {self.rate}")
        _check(self.arrival in ("poisson", "gamma"), "arrival",
               f"must be poisson or gamma, got {self.arrival!r}")
        _check(math.isfinite(self.burstiness) and self.burstiness > 0, "burstiness",
               f"must be > 0, got {self.burstiness}")
        self.prompt.validate("prompt")
        self.output.validate("output")
        _check(self.prefix_groups >= 0, "prefix-groups", f"must be >= 0, got {self.prefix_groups}")
        _check(0 <= self.prefix_share <= 1, "prefix-share", f"must be in [0, 1], got {self.prefix_share}")
        if self.prefix_groups:
            _check(1 <= self.prefix_low <= self.prefix_high, "prefix-min",
                   f"must be in [1, prefix-max], got {self.prefix_low}")
            _check(self.prefix_high < self.prompt.high, "prefix-max",
                   f"must be below prompt-max ({self.prompt.high}) so prompts keep a token of their own")


def generate(spec: SynthSpec) -> list[dict[str, object]]:
    """The requests as native JSONL records, in arrival order."""
    rng = np.random.Generator(np.random.PCG64(spec.seed))
    n = spec.requests
    times = _arrivals(spec, rng)  # [n] seconds, first 0.0
    prompts = spec.prompt.draw(rng, n)  # [n]
    outputs = spec.output.draw(rng, n)  # [n]
    records: list[dict[str, object]] = [
        {"timestamp": float(times[i]), "prompt_tokens": int(prompts[i]), "output_tokens": int(outputs[i])}
        for i in range(n)]
    if spec.prefix_groups and spec.prefix_share > 0:
        lengths = rng.integers(spec.prefix_low, spec.prefix_high + 1, size=spec.prefix_groups)  # [groups]
        joins = rng.random(n) < spec.prefix_share  # [n]
        group = rng.integers(0, spec.prefix_groups, size=n)  # [n]
        for i in np.flatnonzero(joins):
            prefix = int(lengths[group[i]])
            records[i]["prompt_tokens"] = max(int(prompts[i]), prefix + 1)
            records[i]["prefix_id"] = f"group-{group[i]}"
            records[i]["prefix_tokens"] = prefix
    return records


def _arrivals(spec: SynthSpec, rng: np.random.Generator) -> np.ndarray:
    """[n] arrival times in seconds, first at 0.0, rounded to milliseconds."""
    mean_gap = 1.0 / spec.rate
    if spec.arrival == "poisson":
        gaps = rng.exponential(mean_gap, size=spec.requests)
    else:  # gamma with shape k has CV 1/sqrt(k); the scale keeps the mean gap
        shape = 1.0 / spec.burstiness**2
        gaps = rng.gamma(shape, mean_gap / shape, size=spec.requests)
    gaps[0] = 0.0
    return np.round(np.cumsum(gaps), 3)


def write_jsonl(spec: SynthSpec, path: str | Path) -> int:
    """Write the traffic atomically (a temporary file renamed into place); returns the request count."""
    lines = [json.dumps(record) + "\n" for record in generate(spec)]
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(lines)
    os.replace(tmp, target)
    return len(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tuner.traffic.synth", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", required=True, help="where to write the JSONL")
    p.add_argument("--requests", type=int, required=True, help="number of requests")
    p.add_argument("--rate", type=float, required=True, help="mean arrival rate, requests per second")
    p.add_argument("--seed", type=int, default=0, help="seed of the whole file")
    p.add_argument("--arrival", choices=("poisson", "gamma"), default="poisson", help="arrival process")
    p.add_argument("--burstiness", type=float, default=1.0, help="gamma: CV of the gaps")
    for name, median, high in (("prompt", 64.0, 1024), ("output", 32.0, 256)):
        p.add_argument(f"--{name}-dist", choices=("lognormal", "uniform"), default="lognormal",
                       help=f"{name} length distribution")
        p.add_argument(f"--{name}-median", type=float, default=median, help=f"lognormal median {name} length")
        p.add_argument(f"--{name}-sigma", type=float, default=0.8, help=f"lognormal sigma of log({name})")
        p.add_argument(f"--{name}-min", type=int, default=1, help=f"shortest {name}, tokens")
        p.add_argument(f"--{name}-max", type=int, default=high, help=f"longest {name}, tokens")
    p.add_argument("--prefix-groups", type=int, default=0, help="number of shared-prefix groups")
    p.add_argument("--prefix-share", type=float, default=0.0, help="share of requests in a group")
    p.add_argument("--prefix-min", type=int, default=16, help="shortest group prefix, tokens")
    p.add_argument("--prefix-max", type=int, default=64, help="longest group prefix, tokens")
    return p


def spec_from_args(args: argparse.Namespace) -> SynthSpec:
    def dist(name: str) -> LengthDist:
        get = lambda key: getattr(args, f"{name}_{key}")
        return LengthDist(get("dist"), get("median"), get("sigma"), get("min"), get("max"))

    return SynthSpec(args.requests, args.rate, args.seed, args.arrival, args.burstiness, dist("prompt"),
                     dist("output"), args.prefix_groups, args.prefix_share, args.prefix_min, args.prefix_max)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        spec = spec_from_args(args)
    except SynthError as e:
        parser.error(str(e))
    count = write_jsonl(spec, args.out)
    print(f"wrote {count} requests to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
