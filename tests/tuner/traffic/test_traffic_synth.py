"""The synthetic generator: the shipped sample regenerates byte for byte; shapes; the command line."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tuner.traffic import SAMPLE_TRAFFIC, length_percentiles, load_traffic
from tuner.traffic.synth import LengthDist, SynthError, SynthSpec, generate, main, write_jsonl

README = SAMPLE_TRAFFIC.parent / "README.md"


def _recorded_command(name: str) -> list[str]:
    (line,) = [ln for ln in README.read_text().splitlines()
               if ln.startswith(f"python -m tuner.traffic.synth --out tuner/data/{name} ")]
    return shlex.split(line)[3:]


@pytest.mark.parametrize("name", ["sample.jsonl", "rag.jsonl"])
def test_shipped_traffic_regenerates_byte_for_byte(tmp_path, name):
    argv = _recorded_command(name)
    out = argv.index("--out") + 1
    argv[out] = str(tmp_path / name)
    assert main(argv) == 0
    assert (tmp_path / name).read_bytes() == (SAMPLE_TRAFFIC.parent / name).read_bytes()


def test_shipped_sample_shape():
    load = load_traffic(SAMPLE_TRAFFIC, vocab_size=256)
    requests = load.requests
    assert (len(requests), load.format, load.skipped_count, load.out_of_order) == (120, "native", 0, 0)
    assert requests[-1].arrival_s == 31.048  # ~3.9 req/s
    assert [tuple(p) for p in length_percentiles(requests, qs=(0.1, 50, 100))] == [
        (0.1, 16, 4, 22), (50, 61, 13, 77), (100, 200, 48, 227)]
    heads = {r.prompt_token_ids[:16] for r in requests}
    assert len(requests) - len(heads) == 62 - 3  # 62 requests in 3 prefix groups share their first 16 tokens


@pytest.mark.parametrize("arrival", ["poisson", "gamma"])
def test_generated_traffic_is_valid_native_jsonl(tmp_path, arrival):
    spec = SynthSpec(requests=50, rate=10.0, seed=3, arrival=arrival, burstiness=2.0,
                     prompt=LengthDist("uniform", low=20, high=40),
                     output=LengthDist(median=8, sigma=0.5, low=2, high=9),
                     prefix_groups=2, prefix_share=0.5, prefix_low=5, prefix_high=30)
    path = tmp_path / "t.jsonl"
    assert write_jsonl(spec, path) == 50
    records = generate(spec)
    times = [r["timestamp"] for r in records]
    assert times[0] == 0.0 and times == sorted(times)
    assert all(20 <= r["prompt_tokens"] <= 40 and 2 <= r["output_tokens"] <= 9 for r in records)
    grouped = [r for r in records if "prefix_id" in r]
    assert all(5 <= r["prefix_tokens"] < r["prompt_tokens"] for r in grouped) and grouped
    load = load_traffic(path, vocab_size=100)
    assert [r.prompt_tokens for r in load.requests] == [r["prompt_tokens"] for r in records]


def test_burstiness_shapes_the_gaps():
    def cv(arrival: str, burstiness: float) -> float:
        times = np.array([r["timestamp"] for r in generate(SynthSpec(4000, 5.0, 1, arrival, burstiness))])
        gaps = np.diff(times)
        return float(gaps.std() / gaps.mean())

    assert 0.95 < cv("poisson", 1.0) < 1.05
    assert 2.7 < cv("gamma", 3.0) < 3.3
    assert 0.45 < cv("gamma", 0.5) < 0.55


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"requests": 0}, "--requests: must be in [1, 10000000], got 0"),
    ({"rate": 0.0}, "--rate: must be > 0, got 0.0"),
    ({"arrival": "uniform"}, "--arrival: must be poisson or gamma, got 'uniform'"),
    ({"prompt": LengthDist(low=10, high=5)}, "--prompt-max: must be in [prompt-min, 10000000], got 5"),
    ({"output": LengthDist(kind="zipf")}, "--output-dist: must be lognormal or uniform, got 'zipf'"),
    ({"prefix_groups": 2, "prefix_high": 1024}, "--prefix-max: must be below prompt-max (1024) so prompts keep a "
                                                "token of their own"),
])
def test_spec_errors_name_the_flag(kwargs, message):
    with pytest.raises(SynthError) as e:
        SynthSpec(**{"requests": 10, "rate": 1.0, **kwargs})
    assert str(e.value) == message


def test_command_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["--out", str(tmp_path / "x"), "--requests", "5", "--rate", "1", "--prompt-min", "0"])
    assert e.value.code == 2
    assert "error: --prompt-min: must be in [1, 10000000], got 0" in capsys.readouterr().err
    done = subprocess.run([sys.executable, "-m", "tuner.traffic.synth", "--help"], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[3], check=True)
    assert "--prefix-share" in done.stdout and "--burstiness" in done.stdout
