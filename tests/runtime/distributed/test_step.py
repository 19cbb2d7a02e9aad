"""A step as rank 0 sends it: the other ranks build exactly rank 0's inputs from it, block tables included."""

from __future__ import annotations

import pickle

import torch

from runtime.config import KernelConfig
from runtime.distributed.step import StepMessage
from runtime.inputs import build_inputs
from runtime.kv.manager import BlockCopy, KVCacheManager
from runtime.scheduler import ScheduledSeq, SchedulerOutput
from tests.runtime.kv_factories import make_manager, make_seq


def test_a_rank_rebuilds_rank0s_inputs():
    kv = make_manager(block_size=4, num_blocks=16)
    seqs = [make_seq(list(range(1, 8)), 0), make_seq(list(range(1, 9)), 1), make_seq(list(range(1, 21)), 2)]
    scheduled = (ScheduledSeq(seqs[0], 6, 1, True), ScheduledSeq(seqs[1], 3, 5, False),
                 ScheduledSeq(seqs[2], 0, 20, True))
    for s in scheduled:
        assert kv.try_allocate(s.seq, s.start + s.num_new_tokens) is not None
    out = SchedulerOutput(scheduled, (), (), (BlockCopy(0, 3, 5),), 26, 0)
    message = pickle.loads(pickle.dumps(StepMessage.of(out, kv)))  # as the pipe carries it
    assert [(r.start, r.tokens, r.table) for r in message.rows] == [
        (6, [7], [0, 1]), (3, [4, 5, 6, 7, 8], [2, 3]), (0, list(range(1, 21)), [4, 5, 6, 7, 8])]
    mirror = KVCacheManager(kv.tiers, enable_prefix_caching=False, watermark=0.0)
    message.apply_tables(mirror)
    rebuilt = message.output()
    assert (rebuilt.block_copies, rebuilt.num_batched_tokens) == (out.block_copies, 26)
    kernel, cpu = KernelConfig(), torch.device("cpu")
    want, got = build_inputs(out.scheduled, kv, kernel, False, cpu), build_inputs(rebuilt.scheduled, mirror,
                                                                                   kernel, False, cpu)
    for name in ("input_ids", "positions", "sample_rows"):
        assert getattr(got, name).tolist() == getattr(want, name).tolist(), name
    (w,), (g,) = want.meta.tiers, got.meta.tiers
    assert g.slot_mapping.tolist() == w.slot_mapping.tolist()
    assert g.decode.block_tables.tolist() == w.decode.block_tables.tolist()
    assert g.prefill.block_tables.tolist() == w.prefill.block_tables.tolist()
    assert g.prefill.query_start_loc.tolist() == w.prefill.query_start_loc.tolist()
