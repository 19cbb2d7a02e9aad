"""Each format on small hand-written files: exact token ids, arrival times, ids, sources, detection."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import pytest
from traffic_factories import jline, ref_stream, ref_text

from tuner.traffic import TrafficError, load_traffic

V = 1000  # vocab_size of these tests


def test_native_prefix_id_shares_exact_tokens_and_rebases_arrivals(write):
    path = write("n.jsonl",
                 jline(timestamp=100.5, prompt_tokens=12, output_tokens=3, prefix_id="sys", prefix_tokens=8),
                 jline(timestamp=100.25, prompt_tokens=10, output_tokens=2, prefix_id="sys", prefix_tokens=8),
                 "",
                 jline(timestamp=101, prompt_tokens=6, output_tokens=1, prefix_id="sys", prefix_tokens=4,
                       priority=2, request_id="r-3"))
    load = load_traffic(path, vocab_size=V)
    assert load.format == "native"
    assert [r.request_id for r in load.requests] == ["n:2", "n:1", "r-3"]
    assert [r.arrival_s for r in load.requests] == [0.0, 0.25, 0.75]
    assert [r.source for r in load.requests] == [f"{path}:2", f"{path}:1", f"{path}:4"]
    assert [(r.output_tokens, r.priority) for r in load.requests] == [(2, 0), (3, 0), (1, 2)]
    prefix = ref_stream("prefix:sys", 8, V)
    assert prefix[:4] == (658, 792, 250, 733)  # pinned: the synthesis must not drift between versions
    assert load.requests[0].prompt_token_ids == prefix + ref_stream("line:2", 2, V)
    assert load.requests[1].prompt_token_ids == prefix + ref_stream("line:1", 4, V)
    assert load.requests[2].prompt_token_ids == prefix[:4] + ref_stream("line:4", 2, V)
    assert (load.out_of_order, load.skipped_count, load.rejected_too_long, load.truncated) == (1, 0, 0, 0)
    assert load.sha256 == hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_native_hash_ids_share_exactly_the_common_blocks(write):
    path = write("h.jsonl",
                 jline(timestamp=0, prompt_tokens=40, output_tokens=1, hash_ids=[7, 8, 9]),
                 jline(timestamp=0, prompt_tokens=20, output_tokens=1, hash_ids=[7, "x"]))
    a, b = load_traffic(path, vocab_size=V).requests
    assert a.prompt_token_ids == (ref_stream("block:16:i7", 16, V) + ref_stream("block:16:i8", 16, V)
                                  + ref_stream("block:16:i9", 8, V))
    assert b.prompt_token_ids == ref_stream("block:16:i7", 16, V) + ref_stream("block:16:sx", 4, V)
    c, d = load_traffic(path, vocab_size=V, hash_block_size=8).requests
    blocks = [ref_stream(f"block:8:i{h}", 8, V) for h in (7, 8, 9)]
    assert c.prompt_token_ids == blocks[0] + blocks[1] + blocks[2] + ref_stream("line:1", 16, V)
    assert d.prompt_token_ids == blocks[0] + ref_stream("block:8:sx", 8, V) + ref_stream("line:2", 4, V)


def test_native_text_and_explicit_prompts(write):
    path = write("t.jsonl",
                 jline(timestamp=0, prompt="You are helpful. Hi", output_tokens=2),
                 jline(timestamp=1, prompt="You are helpful. Bye now", output_tokens=2),
                 jline(timestamp=2, prompt_token_ids=[0, 5, 999], output_tokens=1))
    a, b, c = load_traffic(path, vocab_size=V).requests
    assert a.prompt_token_ids == ref_text("You are helpful. Hi", V) == (994, 295, 942, 714, 834)
    assert b.prompt_token_ids == ref_text("You are helpful. Bye now", V)
    assert a.prompt_token_ids[:4] == b.prompt_token_ids[:4] and a.prompt_token_ids[4] != b.prompt_token_ids[4]
    assert c.prompt_token_ids == (0, 5, 999)
    tokenized = load_traffic(path, vocab_size=V, tokenizer=lambda text: [len(text), 5]).requests
    assert [r.prompt_token_ids for r in tokenized] == [(19, 5), (24, 5), (0, 5, 999)]


def test_mooncake_milliseconds_and_block_sharing(write):
    path = write("m.jsonl",
                 jline(timestamp=0, input_length=10, output_length=2, hash_ids=[0, 1, 2]),
                 jline(timestamp=40, input_length=9, output_length=1, hash_ids=[0, 1], chat_id=5),
                 jline(timestamp=277.5, input_length=3, output_length=4))
    load = load_traffic(path, vocab_size=V, hash_block_size=4)
    a, b, c = load.requests
    assert load.format == "mooncake"
    assert [r.arrival_s for r in load.requests] == [0.0, 0.04, 0.2775]
    shared = ref_stream("block:4:i0", 4, V) + ref_stream("block:4:i1", 4, V)
    assert a.prompt_token_ids == shared + ref_stream("block:4:i2", 2, V)
    assert b.prompt_token_ids == shared + ref_stream("line:2", 1, V)
    assert c.prompt_token_ids == ref_stream("line:3", 3, V)
    assert [r.output_tokens for r in load.requests] == [2, 1, 4]
    assert [r.request_id for r in load.requests] == ["m:1", "m:2", "m:3"]


def test_mooncake_default_block_is_512_tokens(write):
    path = write("m.jsonl", jline(timestamp=5, input_length=600, output_length=1, hash_ids=[3, 4]))
    (r,) = load_traffic(path, vocab_size=V).requests
    assert r.prompt_token_ids == ref_stream("block:512:i3", 512, V) + ref_stream("block:512:i4", 88, V)


def test_azure_wall_clock_arrivals_exact(write):
    path = write("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens", "2023-11-16 18:17:03.9799600,48,10",
                 "2023-11-16 18:17:04.0319600,31,8", "2023-11-16 18:17:04.0781490,11,27", newline="\r\n")
    load = load_traffic(path, vocab_size=V)
    assert load.format == "azure"
    assert [r.arrival_s for r in load.requests] == [0.0, 0.052, 0.098189]
    assert [(r.prompt_tokens, r.output_tokens) for r in load.requests] == [(48, 10), (31, 8), (11, 27)]
    assert load.requests[2].prompt_token_ids == ref_stream("line:4", 11, V)
    assert [r.request_id for r in load.requests] == ["a:2", "a:3", "a:4"]


def test_azure_columns_by_name_offsets_and_seconds(write):
    path = write("b.csv", "GeneratedTokens, Extra ,timestamp,contexttokens",
                 "5,x,2024-05-10 00:00:01.5+01:00,7", "6,y,2024-05-10 00:00:00Z,3")
    load = load_traffic(path, vocab_size=V)
    assert [(r.request_id, r.arrival_s, r.prompt_tokens, r.output_tokens) for r in load.requests] == [
        ("b:2", 0.0, 7, 5), ("b:3", 3598.5, 3, 6)]
    seconds = write("c.csv", "TIMESTAMP,ContextTokens,GeneratedTokens", "12.5,3,4", "10,2,1")
    assert [r.arrival_s for r in load_traffic(seconds, vocab_size=V).requests] == [0.0, 2.5]


def test_openai_flat_and_nested_logs(write):
    system = {"role": "system", "content": "Be brief."}
    flat = jline(created=1700000000, id="chatcmpl-1", model="m", temperature=0.2,
                 messages=[system, {"role": "user", "content": "Hi"}],
                 usage={"prompt_tokens": 3, "completion_tokens": 7, "total_tokens": 10})
    parts = [{"type": "text", "text": "Hello"}, {"type": "image_url", "image_url": {}}]
    usage = {"prompt_tokens": 20, "completion_tokens": 4}
    nested = jline(timestamp="2023-11-14T22:13:20.5Z",
                   request={"model": "m", "messages": [system, {"role": "user", "content": parts}]},
                   response={"id": "chatcmpl-2", "created": 1, "usage": usage})
    load = load_traffic(write("o.jsonl", flat, nested), vocab_size=V)
    a, b = load.requests
    assert load.format == "openai"
    assert [(r.request_id, r.arrival_s, r.output_tokens) for r in load.requests] == [
        ("chatcmpl-1", 0.0, 7), ("chatcmpl-2", 0.5, 4)]
    assert a.prompt_token_ids == ref_text("<|system|>\nBe brief.\n<|user|>\nHi\n", V)[:3]
    text = ref_text("<|system|>\nBe brief.\n<|user|>\nHello[image_url]\n", V)
    assert len(text) == 12
    assert b.prompt_token_ids == text + ref_stream("line:2", 8, V)  # fitted to usage.prompt_tokens
    assert b.prompt_token_ids[:3] == a.prompt_token_ids  # the shared system prompt shares tokens


@pytest.mark.parametrize(("line", "expected"), [
    (jline(timestamp=0, prompt_tokens=1, output_tokens=1), "native"),
    (jline(timestamp=0, input_length=1, output_length=1), "mooncake"),
    (jline(created=0, prompt="x", usage={"prompt_tokens": 1, "completion_tokens": 1}), "openai"),
])
def test_detection_from_content_past_a_bad_first_line(write, line, expected):
    load = load_traffic(write("x.txt", "", "{not json", line), vocab_size=V, on_error="skip")
    assert (load.format, len(load.requests), load.skipped_count) == (expected, 1, 1)


def test_detection_of_azure_csv(write):
    path = write("x.txt", "  ", "TIMESTAMP,ContextTokens,GeneratedTokens", "1,2,3")
    assert load_traffic(path, vocab_size=V).format == "azure"


def test_format_override_and_undetectable_files(write):
    moon = write("m.jsonl", jline(timestamp=0, input_length=1, output_length=1))
    with pytest.raises(TrafficError) as e:
        load_traffic(moon, vocab_size=V, fmt="native")
    assert str(e.value) == (f"{moon}:1: unknown field 'input_length'; known fields: hash_ids, output_tokens, "
                            "prefix_id, prefix_tokens, priority, prompt, prompt_token_ids, prompt_tokens, "
                            "request_id, timestamp")
    odd = write("odd.jsonl", jline(a=1), "hello")
    with pytest.raises(TrafficError) as e:
        load_traffic(odd, vocab_size=V)
    assert str(e.value) == (f"{odd}: cannot tell the format from its first 2 non-blank lines; "
                            "pass the format (openai, mooncake, native, azure)")


def test_gzip_file_loads_like_the_plain_one(write, tmp_path):
    lines = [jline(timestamp=t, prompt_tokens=5, output_tokens=2) for t in (0, 1.5)]
    plain = write("g.jsonl", *lines)
    packed = tmp_path / "g.jsonl.gz"
    packed.write_bytes(gzip.compress(Path(plain).read_bytes(), mtime=0))
    a, b = load_traffic(plain, vocab_size=V), load_traffic(packed, vocab_size=V)
    assert [r.prompt_token_ids for r in a.requests] == [r.prompt_token_ids for r in b.requests]
    assert [r.arrival_s for r in b.requests] == [0.0, 1.5]
    assert b.sha256 == hashlib.sha256(packed.read_bytes()).hexdigest() != a.sha256
