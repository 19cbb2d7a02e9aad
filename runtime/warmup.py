"""A cold start that does not show: synthetic requests through a new engine before it reports ready, so
the first real batch compiles no Triton kernel.

The kernels specialise on what a step's composition decides: the prefill tuning (long chunks of one
sequence, many short ones, or chunks after cached prefixes), one sequence or several (Triton specialises an
integer argument equal to 1), split-KV decode above `split_kv_min_len` or not, one tier or several. Four rounds
cover them:

    round 1   prompts of 3, 17, 100, 600 tokens and one past split_kv_min_len together: a mixed step of
              several short chunks, then decodes with and without split-KV
    round 2   the long prompt alone: one long chunk of one sequence (of the flash kernel's long-chunk
              launch too, where the token budget allows a chunk that long)
    round 3   a short prompt alone: a short chunk of one sequence, then single decodes
    round 4   where chunked prefill splits a prompt: one of the token budget + 2 tokens, whose second step is a
              2-token chunk after the first (the flash kernel's launch after a cached prefix, `PREFIXED_TUNING`;
              on pages of 128 tokens or more `TMA_LONG_TUNING`, the launch of fresh chunks of 1,024 tokens too)

Every prompt starts at its own offset of one token sequence, so none hits the prefix cache (a hit would shorten
its chunk). Each request generates 3 tokens, EOS ignored; the engine is reset afterwards (empty pool and prefix
cache, fresh totals), so nothing of the warm-up is visible to what runs next. A few seconds once the kernels are
in Triton's disk cache.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernels.paged_prefill import LONG_CHUNK
from runtime.sampling_params import RequestOutputKind, SamplingParams

if TYPE_CHECKING:
    from runtime.engine import LLMEngine

_SHORT = (3, 17, 100, 600)


def warm_up(engine: LLMEngine) -> None:
    """Run the warm-up rounds on `engine` (no requests of its own may be in flight), then reset it."""
    assert not engine.has_unfinished_requests(), "warm up a new engine, before any request"
    longest = engine.max_model_len - 3
    long_len = min(longest, engine.config.kernel.split_kv_min_len + 100)
    if engine.scheduler.budget >= LONG_CHUNK:
        long_len = min(longest, max(long_len, LONG_CHUNK))
    short = [min(n, longest) for n in _SHORT]
    rounds = [[*short, long_len], [long_len], [short[1]]]
    prefixed = engine.scheduler.budget + 2
    if engine.scheduler.chunked and prefixed <= longest:
        rounds.append([prefixed])
    first = 0
    for round_lengths in rounds:
        _run(engine, round_lengths, first)
        first += len(round_lengths)
    engine.reset()


def _run(engine: LLMEngine, lengths: list[int], first: int) -> None:
    """Prompts `first`, `first` + 1, ...: prompt i starts at offset i of one token sequence (its first block
    matches no earlier prompt's)."""
    params = SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True, output_kind=RequestOutputKind.FINAL_ONLY)
    vocab = engine.vocab_size
    for i, n in enumerate(lengths, start=first):
        engine.add_request(f"warm-up-{i}", [(7 + 31 * (i + j)) % vocab for j in range(n)], params)
    while engine.has_unfinished_requests():
        engine.step()
