"""Exact `file:line: reason` messages, skip mode accounting, the max_model_len policy, file problems."""

from __future__ import annotations

from unittest import mock

import pytest
from traffic_factories import jline, ref_stream

from tuner.traffic import TrafficError, load_traffic
from tuner.traffic import requests as records

V = 1000
GOOD = {"native": jline(timestamp=0, prompt_tokens=5, output_tokens=2),
        "mooncake": jline(timestamp=0, input_length=5, output_length=2),
        "openai": jline(created=0, prompt="hi", usage={"prompt_tokens": 2, "completion_tokens": 1})}
HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


def _native(**fields: object) -> str:
    return jline(**{"timestamp": 1, "prompt_tokens": 5, "output_tokens": 2, **fields})


def _openai(**fields: object) -> str:
    base = {"created": 1, "messages": [{"role": "user", "content": "hi"}],
            "usage": {"prompt_tokens": 2, "completion_tokens": 1}}
    return jline(**{k: v for k, v in {**base, **fields}.items() if v is not None})


NATIVE_CASES = [
    (jline(timestamp=1, prompt_tokens=5), "output_tokens is missing"),
    (_native(output_token=2), "unknown field 'output_token' (did you mean 'output_tokens'?)"),
    (_native(prompt_tokens=True), "prompt_tokens must be an integer, got true"),
    (_native(prompt_tokens=0), "prompt_tokens must be in [1, 10000000], got 0"),
    (_native(output_tokens=-3), "output_tokens must be in [1, 10000000], got -3"),
    (_native(prompt_tokens=10_000_001), "prompt_tokens must be in [1, 10000000], got 10000001"),
    (_native(prompt_tokens=5.0), "prompt_tokens must be an integer, got 5.0"),
    ('{"timestamp": NaN, "prompt_tokens": 5, "output_tokens": 2}',
     "not valid JSON: NaN is not a number JSON allows"),
    (_native(timestamp="soon"), "timestamp must be a number, got 'soon'"),
    (_native(timestamp=-1), "timestamp must be in [0, 1000000000000], got -1"),
    ('{"timestamp": 1e999, "prompt_tokens": 5, "output_tokens": 2}',
     "timestamp must be in [0, 1000000000000], got 1E+999"),
    ('{"timestamp": 1, "prompt_tokens": 5, "output_tokens": 2',
     "not valid JSON: Expecting ',' delimiter (column 56)"),
    ("[1, 2]", "expected a JSON object, got a list of 2"),
    (_native(prompt="hi"),
     "give exactly one of prompt_tokens, prompt, prompt_token_ids (got prompt_tokens, prompt)"),
    (jline(timestamp=1, output_tokens=2),
     "give exactly one of prompt_tokens, prompt, prompt_token_ids (got none)"),
    (_native(prefix_id="a"), "prefix_tokens (the length of the shared prefix) is missing"),
    (_native(prefix_tokens=3), "prefix_id (prefix_tokens needs it) is missing"),
    (_native(prefix_id="a", prefix_tokens=6), "prefix_tokens must be in [1, 5], got 6"),
    (_native(prefix_id="a", prefix_tokens=3, hash_ids=[1]),
     "give hash_ids or prefix_id/prefix_tokens, not both"),
    (_native(prompt_tokens=16, hash_ids=[1, 2]),
     "hash_ids has 2 blocks but 16 prompt tokens fill only 1 of 16 tokens "
     "(a different block size? pass hash_block_size)"),
    (_native(hash_ids=[None]), "hash_ids[0] must be an integer or a string, got null"),
    (jline(timestamp=1, prompt_token_ids=[1, True], output_tokens=2),
     "prompt_token_ids[1] must be a token id (an integer >= 0), got true"),
    (jline(timestamp=1, prompt_token_ids=[1, 1000], output_tokens=2),
     "prompt_token_ids has 1000, outside the vocabulary [0, 1000)"),
    (jline(timestamp=1, prompt_token_ids=[], output_tokens=2),
     "prompt_token_ids must hold 1 to 10000000 ids, got 0"),
    (jline(timestamp=1, prompt="", output_tokens=2), "the prompt is empty"),
    (jline(timestamp=1, prompt="x", output_tokens=2, hash_ids=[1]),
     "hash_ids goes with prompt_tokens, not with prompt"),
    ('{"timestamp": 1, "timestamp": 2, "prompt_tokens": 5, "output_tokens": 2}',
     "field 'timestamp' appears twice"),
    (_native(priority="high"), "priority must be an integer, got 'high'"),
    (_native(request_id=""), "request_id must have 1 to 256 characters, got 0"),
    ("[" * 100_000, "not valid JSON: nested too deeply"),
    ('{"timestamp": 1e99999999999999999999}', "not valid JSON: a number is out of range"),
]


@pytest.mark.parametrize(("line", "reason"), NATIVE_CASES)
def test_native_line_errors(write, line, reason):
    path = write("e.jsonl", GOOD["native"], line)
    with pytest.raises(TrafficError) as e:
        load_traffic(path, vocab_size=V)
    assert str(e.value) == f"{path}:2: {reason}"


@pytest.mark.parametrize(("fmt", "line", "reason"), [
    ("mooncake", jline(timestamp=0, input_length=5), "output_length is missing"),
    ("mooncake", jline(timestamp=0, input_length="5", output_length=1),
     "input_length must be an integer, got '5'"),
    ("mooncake", jline(timestamp=0, input_length=5, output_length=1, hash_ids="abc"),
     "hash_ids must be a list, got 'abc'"),
    ("mooncake", '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1.5]}',
     "hash_ids[0] must be an integer or a string, got 1.5"),
    ("mooncake", '{"timestamp": 1e16, "input_length": 5, "output_length": 1}',
     "timestamp must be in [0, 1000000000000000], got 1E+16"),
    ("openai", _openai(usage=None), "usage is missing"),
    ("openai", _openai(usage="x"), "usage must be an object, got 'x'"),
    ("openai", _openai(usage={"prompt_tokens": 3}), "usage.completion_tokens is missing"),
    ("openai", _openai(created=None), "timestamp (or created) is missing"),
    ("openai", _openai(timestamp="later"), "timestamp must be unix seconds or ISO-8601, got 'later'"),
    ("openai", _openai(messages=[]), "messages is empty"),
    ("openai", _openai(messages=[{"role": 1}]), "messages[0].role must be a string, got 1"),
    ("openai", _openai(messages=[{"role": "user", "content": [{"type": "text"}]}]),
     "messages[0].content[0].text must be a string, got null"),
    ("openai", _openai(messages=None), "messages (or prompt) is missing"),
])
def test_mooncake_and_openai_line_errors(write, fmt, line, reason):
    path = write("e.jsonl", GOOD[fmt], line)
    with pytest.raises(TrafficError) as e:
        load_traffic(path, vocab_size=V)
    assert str(e.value) == f"{path}:2: {reason}"


@pytest.mark.parametrize(("row", "reason"), [
    ("2023-11-16 18:17:03.9,5", "expected 3 columns, got 2"),
    ("2023-11-16 18:17:03.9,5,0", "GeneratedTokens must be in [1, 10000000], got 0"),
    ("2023-11-16 18:17:03.9,abc,1", "ContextTokens must be an integer, got 'abc'"),
    ("2023-13-16 18:17:03.9,5,1",
     "TIMESTAMP '2023-13-16 18:17:03.9' is not a valid time (month must be in 1..12)"),
    ("yesterday,5,1", "TIMESTAMP must look like 2023-11-16 18:17:03.9799600, got 'yesterday'"),
    ('"unterminated,5,1', "expected 3 columns, got 1"),
])
def test_azure_row_errors(write, row, reason):
    path = write("e.csv", HEADER, "2023-11-16 18:17:03.5,5,1", row)
    with pytest.raises(TrafficError) as e:
        load_traffic(path, vocab_size=V)
    assert str(e.value) == f"{path}:3: {reason}"


def test_azure_missing_header_is_fatal_even_in_skip_mode(write):
    path = write("e.csv", "a,b,c", "2023-11-16 18:17:03.5,5,1")
    with pytest.raises(TrafficError) as e:
        load_traffic(path, vocab_size=V, fmt="azure", on_error="skip")
    assert str(e.value) == (f"{path}:1: expected a header naming TIMESTAMP, ContextTokens, GeneratedTokens; "
                            "missing TIMESTAMP, ContextTokens, GeneratedTokens")


@pytest.mark.parametrize(("raw", "reason"), [
    (b"\x00\x01garbage\n", "binary data, not text (NUL byte at column 1)"),
    (b'{"a": "\xff\xfe"}\n', "not UTF-8 text (byte 0xff at column 8)"),
])
def test_undecodable_lines(write, raw, reason):
    path = write("b.jsonl", raw=(GOOD["native"] + "\n").encode() + raw)
    with pytest.raises(TrafficError) as e:
        load_traffic(path, vocab_size=V)
    assert str(e.value) == f"{path}:2: {reason}"
    assert load_traffic(path, vocab_size=V, on_error="skip").skipped_count == 1


def test_a_line_over_16_mib_is_an_error_and_skippable(write):
    huge = b'{"timestamp": 1, "prompt": "' + b"x" * records.MAX_LINE_BYTES + b'", "output_tokens": 1}\n'
    path = write("big.jsonl", raw=(GOOD["native"] + "\n").encode() + huge + (GOOD["native"] + "\n").encode())
    with pytest.raises(TrafficError) as e:
        load_traffic(path, vocab_size=V)
    assert str(e.value) == f"{path}:2: the line is longer than 16777216 bytes"
    load = load_traffic(path, vocab_size=V, on_error="skip")
    assert ([r.source for r in load.requests], load.skipped_count) == ([f"{path}:1", f"{path}:3"], 1)


def test_skip_mode_counts_lists_and_goes_on(write):
    path = write("s.jsonl", _native(output_tokens=0), GOOD["native"], "nonsense", _native(timestamp=3), "[")
    load = load_traffic(path, vocab_size=V, on_error="skip")
    assert [r.source for r in load.requests] == [f"{path}:2", f"{path}:4"]
    assert load.skipped_count == 3
    assert [tuple(s) for s in load.skipped] == [
        (f"{path}:1", "output_tokens must be in [1, 10000000], got 0"),
        (f"{path}:3", "not valid JSON: Expecting value (column 1)"),
        (f"{path}:5", "not valid JSON: Expecting value (column 2)")]
    with mock.patch("tuner.traffic.loader.MAX_LISTED_SKIPS", 2):
        assert (len(load_traffic(path, vocab_size=V, on_error="skip").skipped), load.skipped_count) == (2, 3)


def test_skip_mode_with_nothing_valid_is_an_error(write):
    path = write("s.jsonl", _native(output_tokens=0), _native(prompt_tokens=-1), "x")
    with pytest.raises(TrafficError) as e:
        load_traffic(path, vocab_size=V, on_error="skip", fmt="native")
    assert str(e.value) == (f"{path}: no valid request (3 bad lines skipped; first: "
                            f"{path}:1: output_tokens must be in [1, 10000000], got 0; "
                            f"{path}:2: prompt_tokens must be in [1, 10000000], got -1; "
                            f"{path}:3: not valid JSON: Expecting value (column 1))")


def test_duplicate_request_ids(write):
    path = write("d.jsonl", _native(request_id="a"), _native(request_id="a"), _native(request_id="d:1"))
    with pytest.raises(TrafficError) as e:
        load_traffic(path, vocab_size=V)
    assert str(e.value) == f"{path}:2: request id 'a' is already used by line 1"
    load = load_traffic(write("d.jsonl", _native(), _native(request_id="d:1")), vocab_size=V, on_error="skip")
    assert [s.reason for s in load.skipped] == ["request id 'd:1' is already used by line 1"]


def test_max_model_len_reject_and_truncate(write):
    lengths = ((10, 5), (3, 2), (4, 12))
    path = write("l.jsonl", *(_native(prompt_tokens=p, output_tokens=o) for p, o in lengths))
    rejected = load_traffic(path, vocab_size=V, max_model_len=12)
    assert ([r.source for r in rejected.requests], rejected.rejected_too_long, rejected.truncated) == (
        [f"{path}:2"], 2, 0)
    cut = load_traffic(path, vocab_size=V, max_model_len=12, long_prompts="truncate")
    assert (cut.rejected_too_long, cut.truncated) == (1, 1)  # output 12 leaves no room for a prompt token
    assert cut.requests[0].prompt_token_ids == ref_stream("line:1", 7, V)  # the start is kept
    assert [r.total_tokens for r in cut.requests] == [12, 5]
    with pytest.raises(TrafficError) as e:
        load_traffic(path, vocab_size=V, max_model_len=4)
    assert str(e.value) == (f"{path}: no request fits max_model_len=4 (3 need more for prompt + output); "
                            "raise max_model_len or pass long_prompts='truncate'")


def test_tokenizer_failures_are_line_errors(write):
    path = write("t.jsonl", jline(timestamp=0, prompt="hi", output_tokens=1))
    cases = ((lambda text: 1 / 0, "the tokenizer failed: ZeroDivisionError: division by zero"),
             (lambda text: [1, V], "the tokenizer returned 1000, not an id in [0, 1000)"),
             (lambda text: [True], "the tokenizer returned True, not an id in [0, 1000)"))
    for tokenizer, reason in cases:
        with pytest.raises(TrafficError) as e:
            load_traffic(path, vocab_size=V, tokenizer=tokenizer)
        assert str(e.value) == f"{path}:1: {reason}"


def test_out_of_order_timestamps_sort_stably(write):
    path = write("o.jsonl", *(_native(timestamp=t) for t in (2, 1, 1, 0)))
    load = load_traffic(path, vocab_size=V)
    assert [r.source for r in load.requests] == [f"{path}:{n}" for n in (4, 2, 3, 1)]
    assert ([r.arrival_s for r in load.requests], load.out_of_order) == ([0.0, 1.0, 1.0, 2.0], 3)


@pytest.mark.parametrize(("raw", "fmt", "reason"), [
    (b"", "auto", "the file is empty (no requests)"),
    (b"  \n\n\t\n", "auto", "the file is empty (no requests)"),
    (b"\n\n", "native", "no requests in the file"),
    (b"TIMESTAMP,ContextTokens,GeneratedTokens\n", "auto", "no requests in the file"),
    (b"\x00\x00\x00", "auto", "1: binary data, not text (NUL byte at column 1)"),
])
def test_whole_file_problems(write, raw, fmt, reason):
    path = write("w.jsonl", raw=raw)
    with pytest.raises(TrafficError) as e:
        load_traffic(path, vocab_size=V, fmt=fmt, on_error="skip")
    assert str(e.value) == f"{path}:{reason}" if reason[0].isdigit() else f"{path}: {reason}"


def test_unreadable_paths(tmp_path):
    cases = ((tmp_path / "missing.jsonl", "No such file or directory"), (tmp_path, "Is a directory"))
    for path, reason in cases:
        with pytest.raises(TrafficError) as e:
            load_traffic(path, vocab_size=V)
        assert str(e.value) == f"{path}: cannot read: {reason}"


@pytest.mark.parametrize(("kwargs", "reason"), [
    ({"fmt": "xml"}, "format must be one of auto, openai, mooncake, native, azure, got 'xml'"),
    ({"on_error": "ignore"}, "on_error must be raise or skip, got 'ignore'"),
    ({"long_prompts": "cut"}, "long_prompts must be reject or truncate, got 'cut'"),
    ({"vocab_size": True}, "vocab_size must be an integer in [6, 16777216], got True"),
    ({"vocab_size": 5}, "vocab_size must be an integer in [6, 16777216], got 5"),
    ({"vocab_size": 1 << 30}, "vocab_size must be an integer in [6, 16777216], got 1073741824"),
    ({"max_model_len": 1}, "max_model_len must be None or an integer >= 2, got 1"),
    ({"hash_block_size": 0}, "hash_block_size must be None or an integer >= 1, got 0"),
    ({"tokenizer": 5}, "tokenizer must be callable (text -> token ids)"),
])
def test_bad_arguments_name_the_argument(write, kwargs, reason):
    path = write("a.jsonl", GOOD["native"])
    with pytest.raises(TrafficError) as e:
        load_traffic(path, **{"vocab_size": V, **kwargs})
    assert str(e.value) == f"{path}: {reason}"
