"""A step's inputs: the prefill chunks' attention paths are planned once a step, from the host's lengths."""

from __future__ import annotations

import torch

from kernels.paged_prefill import PREFIXED_TUNING, SHORT_TUNING
from runtime.config import KernelConfig
from runtime.inputs import build_inputs
from runtime.scheduler import ScheduledSeq
from tests.runtime.kv_factories import make_manager, make_seq


def _step(kv):
    """A decode (one new token after 6), a 5-token chunk after 3 cached, a 20-token prompt: decodes first."""
    seqs = [make_seq(list(range(1, 8)), 0), make_seq(list(range(1, 9)), 1), make_seq(list(range(1, 21)), 2)]
    scheduled = (ScheduledSeq(seqs[0], 6, 1, True), ScheduledSeq(seqs[1], 3, 5, True),
                 ScheduledSeq(seqs[2], 0, 20, True))
    for s in scheduled:
        assert kv.try_allocate(s.seq, s.start + s.num_new_tokens) is not None
    return scheduled


def test_the_triton_path_gets_the_prefill_paths_planned_once_a_step():
    kv = make_manager(block_size=4, num_blocks=16)
    meta = build_inputs(_step(kv), kv, KernelConfig(flash_min_len=16), True, torch.device("cpu")).meta
    prefill = meta.tiers[0].prefill
    assert (prefill.tokens, prefill.query_start_loc.tolist(), prefill.context_lens.tolist()) == (
        slice(1, 26), [0, 5, 25], [8, 20])
    plan = prefill.plan
    assert not plan.all_flash and plan.flash.seqs.tolist() == [1] and plan.flash.rows.tolist() == list(range(5, 25))
    short = plan.short
    assert (short.seqs.tolist(), short.padded_rows.tolist(), short.max_ctx) == ([0], [[0, 1, 2, 3, 4]], 8)
    assert short.visible.sum(dim=-1).tolist() == [[4, 5, 6, 7, 8]]  # positions 3..7 see up to themselves
    assert plan.tuning is SHORT_TUNING  # the flash chunk alone: a fresh 20-token prompt


def test_the_torch_path_plans_nothing():
    kv = make_manager(block_size=4, num_blocks=16)
    meta = build_inputs(_step(kv), kv, KernelConfig(flash_min_len=16), False, torch.device("cpu")).meta
    assert meta.tiers[0].prefill.plan is None


def test_by_default_every_chunk_takes_the_flash_kernel_in_one_launch():
    """The default `flash_min_len` (1): a 5-token chunk and a 20-token prompt both go to flash, nothing to SDPA."""
    kv = make_manager(block_size=4, num_blocks=16)
    assert KernelConfig().flash_min_len == 1
    plan = build_inputs(_step(kv), kv, KernelConfig(), True, torch.device("cpu")).meta.tiers[0].prefill.plan
    assert plan == (True, None, None, SHORT_TUNING, 20, 20)  # 25 tokens over 28 keys: mostly fresh; longest 20, 20


def test_the_plan_tunes_the_flash_launch_from_the_host_context_lengths():
    """A 9-token chunk after 20 cached tokens beside a 4-token prompt: 13 tokens over 33 keys, the cached prefix
    longer than the chunks, so the flash launch packs (`PREFIXED_TUNING`), which only the host's lengths show."""
    kv = make_manager(block_size=4, num_blocks=16)
    seqs = [make_seq(list(range(1, 30)), 0), make_seq(list(range(1, 5)), 1)]
    scheduled = (ScheduledSeq(seqs[0], 20, 9, True), ScheduledSeq(seqs[1], 0, 4, True))
    for s in scheduled:
        assert kv.try_allocate(s.seq, s.start + s.num_new_tokens) is not None
    prefill = build_inputs(scheduled, kv, KernelConfig(), True, torch.device("cpu")).meta.tiers[0].prefill
    assert (prefill.query_start_loc.tolist(), prefill.context_lens.tolist()) == ([0, 9, 13], [29, 4])
    assert prefill.plan == (True, None, None, PREFIXED_TUNING, 9, 29)
