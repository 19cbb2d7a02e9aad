"""`load_traffic`: a trace file in, replayable requests out, with an account of every dropped line.

Order of work, per line: read (bounded) -> parse (the format's parser) -> tokens (text tokenized,
ids checked) -> the max_model_len policy -> kept. Then the kept requests are sorted by timestamp
(stably: ties keep file order; a request logged after a later one counts in `out_of_order`) and
re-based so the first arrives at 0.0.

max_model_len: a request needs prompt + output <= max_model_len (the runtime's admission rule, since
replay forces the output length). One that does not fit is rejected (`long_prompts="reject"`,
counted in `rejected_too_long`) or has its prompt cut to max_model_len - output, keeping the start
so shared prefixes stay shared (`"truncate"`, counted in `truncated`); when the output alone leaves
no room for one prompt token it is rejected either way.

Errors: in `on_error="raise"` mode the first bad line raises `TrafficError("file:line: reason")`. In
`"skip"` mode bad lines are counted and listed and loading goes on; a file with nothing valid left
is still an error that gives the count and the first reasons. Whole-file problems (unreadable,
empty, unknown format, a bad CSV header) raise in both modes.
"""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from tuner.traffic import formats
from tuner.traffic.fields import LineError, LineParser, ParsedLine
from tuner.traffic.reader import RawLine, file_sha256, read_lines
from tuner.traffic.requests import MAX_LISTED_SKIPS, SkippedLine, TrafficError, TrafficLoad, TrafficRequest
from tuner.traffic.tokens import TOKEN_ID_OFFSET, ChatTokenizer, TokenFactory, Tokenizer, prompt_length

ON_ERROR = ("raise", "skip")
LONG_PROMPTS = ("reject", "truncate")
MAX_VOCAB_SIZE = 1 << 24  # the largest real vocabularies are ~260k; the id table costs 8 bytes per id


@dataclass(frozen=True)
class _Options:
    path: str
    fmt: str
    on_error: str
    vocab_size: int
    max_model_len: int | None
    long_prompts: str
    hash_block_size: int | None

    def __post_init__(self) -> None:
        choices = ("auto", *formats.FORMATS)
        self._check(self.fmt in choices, f"format must be one of {', '.join(choices)}, got {self.fmt!r}")
        self._check(self.on_error in ON_ERROR, f"on_error must be raise or skip, got {self.on_error!r}")
        self._check(self.long_prompts in LONG_PROMPTS,
                    f"long_prompts must be reject or truncate, got {self.long_prompts!r}")
        low, high = TOKEN_ID_OFFSET + 2, MAX_VOCAB_SIZE  # at least two synthesizable ids
        self._check(_is_int(self.vocab_size) and low <= self.vocab_size <= high,
                    f"vocab_size must be an integer in [{low}, {high}], got {self.vocab_size!r}")
        self._check(self.max_model_len is None or (_is_int(self.max_model_len) and self.max_model_len >= 2),
                    f"max_model_len must be None or an integer >= 2, got {self.max_model_len!r}")
        block = self.hash_block_size
        self._check(block is None or (_is_int(block) and block >= 1),
                    f"hash_block_size must be None or an integer >= 1, got {self.hash_block_size!r}")

    def _check(self, ok: bool, message: str) -> None:
        if not ok:
            raise TrafficError(f"{self.path}: {message}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _Kept:
    __slots__ = ("line", "ns", "output", "priority", "request_id", "tokens")

    def __init__(self, line: int, parsed: ParsedLine, request_id: str, tokens: tuple[int, ...]) -> None:
        self.line, self.ns, self.request_id = line, parsed.timestamp_ns, request_id
        self.tokens, self.output, self.priority = tokens, parsed.output_tokens, parsed.priority


def load_traffic(path: str | Path, *, fmt: str = "auto", on_error: str = "raise", vocab_size: int,
                 max_model_len: int | None = None, long_prompts: str = "reject",
                 tokenizer: Tokenizer | None = None, chat_tokenizer: ChatTokenizer | None = None,
                 hash_block_size: int | None = None) -> TrafficLoad:
    """Read a traffic file (see the format modules for what each accepts; `fmt="auto"` detects).

    vocab_size bounds synthesized and explicit token ids; tokenizer (text -> ids) is used for text
    prompts when given, chat_tokenizer (chat turns -> ids, the model's template) for logged chat turns;
    hash_block_size overrides the format's tokens per `hash_ids` block.
    """
    opts = _Options(str(path), fmt, on_error, vocab_size, max_model_len, long_prompts, hash_block_size)
    if tokenizer is not None and not callable(tokenizer):
        raise TrafficError(f"{opts.path}: tokenizer must be callable (text -> token ids)")
    sha256 = file_sha256(path)
    if opts.fmt == "auto":
        with closing(read_lines(path)) as head:
            name = formats.detect(head, opts.path)
    else:
        name = opts.fmt
    run = _Run(opts, formats.make_parser(name, hash_block_size), TokenFactory(vocab_size, tokenizer, chat_tokenizer))
    with closing(read_lines(path)) as lines:
        for raw in lines:
            run.take(raw)
    return run.finish(name, sha256)


class _Run:
    """The state of one load: what was kept, skipped, rejected and truncated so far."""

    def __init__(self, opts: _Options, parser: LineParser, factory: TokenFactory) -> None:
        self.opts, self.parser, self.factory = opts, parser, factory
        self.stem = Path(opts.path).stem
        self.kept: list[_Kept] = []
        self.ids: dict[str, int] = {}  # request id -> line, to refuse duplicates
        self.skipped: list[SkippedLine] = []
        self.skipped_count = self.rejected = self.truncated = 0
        self.logged_totals: list[int] = []  # prompt + output of every valid request, kept or not

    def take(self, raw: RawLine) -> None:
        if raw.text is not None and not raw.text.strip():
            return
        try:
            if raw.text is None:
                raise LineError(raw.problem or "unreadable")
            parsed = self.parser.parse(raw.text)
            if parsed is not None:
                self._keep(raw.number, parsed)
        except LineError as e:
            self._bad(raw.number, e)

    def _keep(self, line: int, parsed: ParsedLine) -> None:
        request_id = parsed.request_id or f"{self.stem}:{line}"
        if request_id in self.ids:
            raise LineError(f"request id {request_id!r} is already used by line {self.ids[request_id]}")
        unique_key = f"line:{line}"
        try:
            prompt = self.factory.realize(parsed.prompt, unique_key)
        except ValueError as e:
            raise LineError(str(e)) from None
        self.logged_totals.append(prompt_length(prompt) + parsed.output_tokens)
        keep = self._fit(prompt_length(prompt), parsed.output_tokens)
        if keep is None:
            return
        if keep == 0:
            raise LineError("the prompt is empty")
        self.ids[request_id] = line
        self.kept.append(_Kept(line, parsed, request_id, self.factory.build(prompt, keep, unique_key)))

    def _fit(self, prompt: int, output: int) -> int | None:
        """Prompt tokens to keep under the max_model_len policy; None: rejected (and counted)."""
        limit = self.opts.max_model_len
        if limit is None or prompt + output <= limit:
            return prompt
        if self.opts.long_prompts == "truncate" and output < limit:
            self.truncated += 1
            return limit - output
        self.rejected += 1
        return None

    def _bad(self, line: int, error: LineError) -> None:
        source = f"{self.opts.path}:{line}"
        if error.fatal or self.opts.on_error == "raise":
            raise TrafficError(f"{source}: {error.reason}") from None
        self.skipped_count += 1
        if len(self.skipped) < MAX_LISTED_SKIPS:
            self.skipped.append(SkippedLine(source, error.reason))

    def finish(self, name: str, sha256: str) -> TrafficLoad:
        if not self.kept:
            raise TrafficError(self._why_nothing())
        out_of_order, latest = 0, self.kept[0].ns
        for k in self.kept:
            out_of_order += k.ns < latest
            latest = max(latest, k.ns)
        ordered = sorted(self.kept, key=lambda k: k.ns)  # stable: ties keep file order
        start = ordered[0].ns
        path = self.opts.path
        requests = tuple(TrafficRequest(k.request_id, (k.ns - start) / 10**9, k.tokens, k.output,
                                        f"{path}:{k.line}", k.priority) for k in ordered)
        return TrafficLoad(requests, tuple(self.skipped), self.skipped_count, self.rejected, self.truncated,
                           out_of_order, name, sha256, self.opts.path, tuple(self.logged_totals))

    def _why_nothing(self) -> str:
        path = self.opts.path
        if self.skipped_count:
            reasons = "; ".join(f"{s.source}: {s.reason}" for s in self.skipped[:3])
            return f"{path}: no valid request ({self.skipped_count} bad lines skipped; first: {reasons})"
        if self.rejected:
            return (f"{path}: no request fits max_model_len={self.opts.max_model_len} ({self.rejected} need "
                    "more for prompt + output); raise max_model_len or pass long_prompts='truncate'")
        return f"{path}: no requests in the file"
