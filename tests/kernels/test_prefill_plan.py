"""The prefill launch chosen on the host: `default_tuning`'s rule and the tuning a step's `PrefillPlan` carries
(no Triton needed: the plan is host lists and index tensors)."""

from __future__ import annotations

import pytest
import torch

from kernels.paged_prefill import (
    LONG_TUNING,
    PREFIXED_TUNING,
    SHORT_TUNING,
    TMA_LONG_TUNING,
    TMA_SHORT_TUNING,
    PrefillTuning,
    default_tuning,
    for_group,
)
from kernels.prefill_plan import plan_prefill

CPU = torch.device("cpu")


@pytest.mark.parametrize(("tokens", "seqs", "keys", "expected"), [
    (2048, 1, 6144, PREFIXED_TUNING),  # 2,048 after 4,096
    (2048, 1, 4096, PREFIXED_TUNING),  # 2,048 after 2,048: a prefix as long as the chunk is enough
    (2048, 1, 4095, SHORT_TUNING),  # one position short of it
    (2048, 2, 8192, PREFIXED_TUNING),  # 2 x 1,024 after 3,072
    (8192, 1, 16384, PREFIXED_TUNING),  # a long chunk after a prefix as long
    (2048, 1, 2048, SHORT_TUNING),  # a fresh prompt
    (8192, 1, 8192, LONG_TUNING),  # a fresh prompt of LONG_CHUNK tokens or more
    (8192, 2, 8192, LONG_TUNING),  # two fresh prompts of 4,096: LONG_CHUNK on average
    (8192, 3, 8192, SHORT_TUNING),  # three: under it
    (2048, 1, 0, SHORT_TUNING),  # keys unknown: the rule of fresh prompts
    (8192, 1, 0, LONG_TUNING),
    (0, 0, 0, SHORT_TUNING),
])  # fmt: skip
def test_default_tuning_packs_where_the_prefixes_are_as_long_as_the_chunks(tokens, seqs, keys, expected) -> None:
    assert default_tuning(tokens, seqs, keys) is expected


@pytest.mark.parametrize(("tokens", "seqs", "keys", "pages", "expected"), [
    (2048, 1, 4096, 128, TMA_LONG_TUNING),  # 2,048 after 2,048: unpacked 128x128 tiles by TMA
    (2048, 1, 2048, 128, TMA_LONG_TUNING),  # a fresh prompt of TMA_LONG_CHUNK tokens or more
    (1024, 1, 1024, 128, TMA_LONG_TUNING),
    (1023, 1, 1023, 128, TMA_SHORT_TUNING),  # one token under it
    (8192, 16, 8192, 128, TMA_SHORT_TUNING),  # 16 x 512: small tiles
    (8192, 16, 8192, 256, TMA_SHORT_TUNING),
    (2048, 1, 6144, 64, TMA_SHORT_TUNING),  # 64-token pages hold no 128-key tile: 64x64 tiles always
    (8192, 1, 8192, 64, TMA_SHORT_TUNING),
    (2048, 1, 6144, 32, PREFIXED_TUNING),  # pages too small for a tile: the rule above
    (8192, 1, 8192, 16, LONG_TUNING),
])  # fmt: skip
def test_default_tuning_on_pages_that_hold_whole_tiles_takes_tma(tokens, seqs, keys, pages, expected) -> None:
    assert default_tuning(tokens, seqs, keys, pages) is expected
    assert expected.page_tma == (pages >= 64)


def test_tma_tunings_are_the_short_and_long_tiles_by_tma() -> None:
    assert SHORT_TUNING._replace(page_tma=True) == TMA_SHORT_TUNING
    assert LONG_TUNING._replace(page_tma=True) == TMA_LONG_TUNING
    assert (SHORT_TUNING.block_n, LONG_TUNING.block_n) == (64, 128)


def test_the_plan_passes_the_page_size_to_the_rule() -> None:
    assert plan_prefill([0, 2048], [2048], 1, CPU, 128).tuning is TMA_LONG_TUNING
    assert plan_prefill([0, 2048], [2048], 1, CPU, 16).tuning is SHORT_TUNING
    assert plan_prefill([0, 2048], [2048], 1, CPU).tuning is SHORT_TUNING  # page size not known


def test_prefixed_tuning_is_the_long_tiles_packed() -> None:
    # (block_m, block_n, num_warps, num_stages, pack_gqa, warp_specialize, page_tma)
    assert tuple(PREFIXED_TUNING) == (128, 128, 8, 3, True, False, False)
    assert PREFIXED_TUNING._replace(pack_gqa=False) == LONG_TUNING


@pytest.mark.parametrize(("tuning", "group", "expected"), [
    (PREFIXED_TUNING, 7, PREFIXED_TUNING),  # Qwen2-7B: 8 rows a token, 16 tokens a tile
    (PREFIXED_TUNING, 128, PREFIXED_TUNING),  # a whole tile for one token's heads
    (PREFIXED_TUNING, 129, LONG_TUNING),  # 256 rows a token: too many for the tile, so unpacked
    (PrefillTuning(16, 16, 4, 1, True), 32, PrefillTuning(16, 16, 4, 1, False)),
    (SHORT_TUNING, 1000, SHORT_TUNING),  # unpacked already
])  # fmt: skip
def test_for_group_unpacks_a_tile_too_small_for_the_group(tuning, group, expected) -> None:
    assert for_group(tuning, group) == expected


def test_the_plan_of_an_all_flash_batch_carries_the_tuning_of_all_its_chunks() -> None:
    """1,024 tokens after 3,072 and 1,024 fresh: 2,048 tokens over 5,120 keys (the cached 3,072 as long as the
    chunks); the fresh chunk alone would be a fresh prompt."""
    plan = plan_prefill([0, 1024, 2048], [4096, 1024], 1, CPU)
    assert plan == (True, None, None, PREFIXED_TUNING, 1024, 4096)  # and the batch's longest chunk and context
    assert plan_prefill([0, 1024, 2048], [2048, 1024], 1, CPU).tuning is SHORT_TUNING  # 3,072 keys < 4,096
    assert plan_prefill([0, 8192], [8192], 1, CPU).tuning is LONG_TUNING


def test_the_flash_sub_batch_is_tuned_from_the_flash_chunks_only() -> None:
    """A fresh 2,048-token prompt (flash) beside a 4-token chunk after 9,000 (SDPA at flash_min_len 16): the
    batch has 11,052 keys for 2,052 tokens, the flash chunk 2,048 for 2,048, so the flash launch stays short."""
    plan = plan_prefill([0, 2048, 2052], [2048, 9004], 16, CPU)
    assert not plan.all_flash and plan.flash.seqs.tolist() == [0] and plan.short.seqs.tolist() == [1]
    assert plan.tuning is SHORT_TUNING
    plan = plan_prefill([0, 4, 2052], [9004, 4096], 16, CPU)  # the short chunk first; the flash one after 2,048
    assert plan.flash.seqs.tolist() == [1] and plan.flash.starts.tolist() == [0, 2048]
    assert plan.tuning is PREFIXED_TUNING


def test_a_plan_with_no_flash_chunk_carries_the_tuning_of_none() -> None:
    plan = plan_prefill([0, 3, 5], [3, 900], 16, CPU)
    assert plan.flash is None and plan.short.seqs.tolist() == [0, 1]
    assert plan.tuning is SHORT_TUNING  # unused: nothing launches the flash kernel
