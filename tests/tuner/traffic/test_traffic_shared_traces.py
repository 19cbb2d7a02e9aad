"""The real public traces in ../shared/traces/ (skipped when the folder is absent): loaded fully and
checked against counts, times and lengths computed here independently with csv/json/datetime."""

from __future__ import annotations

import csv
import json
from collections import Counter, defaultdict
from datetime import datetime, timezone
from pathlib import Path

import pytest
from traffic_factories import ref_stream

from tuner.traffic import load_traffic

TRACES = Path(__file__).resolve().parents[3].parent / "shared" / "traces"
AZURE = TRACES / "azure_llm_2023_code.csv"
MOONCAKE = TRACES / "mooncake_fast25_synthetic_trace.jsonl"
V = 32000
pytestmark = pytest.mark.skipif(not AZURE.exists() or not MOONCAKE.exists(), reason="../shared/traces/ not here")


def _wall_ns(stamp: str) -> int:
    whole, fraction = stamp.split(".")
    moment = datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)
    return int(moment.timestamp()) * 10**9 + int(fraction.ljust(9, "0"))


@pytest.fixture(scope="module")
def azure_rows() -> list[list[str]]:
    with open(AZURE, newline="") as f:
        return list(csv.reader(f))[1:]


@pytest.fixture(scope="module")
def mooncake_rows() -> list[dict]:
    return [json.loads(line) for line in MOONCAKE.read_text().splitlines()]


def test_azure_code_trace_loads_fully(azure_rows):
    load = load_traffic(AZURE, vocab_size=V)
    assert (load.format, len(load.requests), load.skipped_count, load.out_of_order) == ("azure", 8819, 0, 0)
    assert len(azure_rows) == 8819
    start = _wall_ns(azure_rows[0][0])
    assert [r.arrival_s for r in load.requests] == [(_wall_ns(row[0]) - start) / 1e9 for row in azure_rows]
    assert [r.arrival_s for r in load.requests[:3]] == [0.0, 0.052, 0.098189]
    assert load.requests[-1].arrival_s == 3435.948056
    assert [(r.prompt_tokens, r.output_tokens) for r in load.requests] == [(int(p), int(o)) for _, p, o in azure_rows]
    assert sum(r.prompt_tokens for r in load.requests) == 18_059_974
    assert load.requests[0].prompt_token_ids[:32] == ref_stream("line:2", 32, V)


def test_mooncake_trace_rejects_long_and_shares_prefix_blocks(mooncake_rows):
    load = load_traffic(MOONCAKE, vocab_size=V, max_model_len=16384)
    kept = [row for row in mooncake_rows if row["input_length"] + row["output_length"] <= 16384]
    assert (load.format, len(load.requests), load.rejected_too_long) == ("mooncake", len(kept), 3993 - len(kept))
    assert (len(load.requests), load.rejected_too_long) == (2385, 1608)
    assert [r.arrival_s for r in load.requests] == [(row["timestamp"] - kept[0]["timestamp"]) / 1000 for row in kept]
    assert [r.prompt_tokens for r in load.requests] == [row["input_length"] for row in kept]
    blocks: dict[int, set[tuple[int, ...]]] = defaultdict(set)
    for request, row in zip(load.requests, kept):
        for i, h in enumerate(row["hash_ids"]):
            if (i + 1) * 512 <= row["input_length"]:
                blocks[h].add(request.prompt_token_ids[i * 512:(i + 1) * 512])
    assert all(len(variants) == 1 for variants in blocks.values())  # one hash id, one token block
    assert len({next(iter(v)) for v in blocks.values()}) == len(blocks)  # and distinct ids differ
    uses = Counter(h for row in kept for h in row["hash_ids"][:-1])  # full blocks only
    h = min(h for h, n in uses.items() if n > 1)  # a block several requests share
    assert next(iter(blocks[h])) == ref_stream(f"block:512:i{h}", 512, V)


def test_mooncake_trace_truncated_to_fit(mooncake_rows):
    load = load_traffic(MOONCAKE, vocab_size=V, max_model_len=4096, long_prompts="truncate")
    too_long = sum(row["input_length"] + row["output_length"] > 4096 for row in mooncake_rows)
    assert (len(load.requests), load.truncated, load.rejected_too_long) == (3993, too_long, 0)
    assert max(r.total_tokens for r in load.requests) == 4096
    assert load.requests[-1].arrival_s == 1022.025
    assert [r.output_tokens for r in load.requests] == [row["output_length"] for row in mooncake_rows]
