"""The startup heap frozen while an engine serves (runtime.heap)."""

from __future__ import annotations

import gc
import weakref

import pytest

from runtime import CollectorPauses, LLMEngine, frozen_heap
from runtime.config import EngineConfig


@pytest.fixture(autouse=True)
def _thawed():
    gc.unfreeze()
    yield
    gc.unfreeze()


def _collected(obj: object) -> bool:
    """Whether the collector's generations hold `obj` (frozen objects sit outside them)."""
    return any(o is obj for o in gc.get_objects())


def test_frozen_heap_freezes_the_engine_then_thaws_it():
    engine = LLMEngine(EngineConfig.from_flat("tiny"))
    scheduler = engine.scheduler
    assert _collected(scheduler)
    with frozen_heap() as count:
        assert count > 100_000  # torch, the model's modules, the engine: no collection walks them
        assert not _collected(scheduler)
    assert gc.get_freeze_count() == 0
    assert _collected(scheduler)


def test_frozen_heap_thaws_when_its_block_raises():
    with pytest.raises(RuntimeError, match="measurement failed"), frozen_heap():
        raise RuntimeError("measurement failed")
    assert gc.get_freeze_count() == 0


def test_frozen_heap_leaves_an_outer_freeze_in_place():
    gc.collect()
    gc.freeze()
    outer = gc.get_freeze_count()
    with frozen_heap() as count:
        assert count == outer
    assert gc.get_freeze_count() == outer


def test_a_cycle_dropped_after_the_block_is_collected():
    class Cycle:
        pass

    with frozen_heap():
        a = Cycle()
        a.me = a  # made inside the block: collected as usual
    b = Cycle()
    b.me = b
    with frozen_heap():
        assert not _collected(b)  # frozen here; unfrozen when the block ends
    refs = weakref.ref(a), weakref.ref(b)
    del a, b
    gc.collect()
    assert [r() for r in refs] == [None, None]  # b, frozen by the block, was thawed with it


def test_collector_pauses_records_each_collection_and_its_generation():
    callbacks = list(gc.callbacks)
    with CollectorPauses() as pauses:
        gc.collect()
        gc.collect(0)
    assert gc.callbacks == callbacks  # removed on exit
    assert [g for g, _ in pauses.pauses] == [2, 0]
    summary = pauses.summary()
    assert (summary["collections"], summary["full"]) == (2, 1)
    assert summary["longest_ms"] == max(1e3 * s for _, s in pauses.pauses)
    assert summary["total_ms"] == sum(1e3 * s for _, s in pauses.pauses)


def test_collector_pauses_of_a_block_without_collections():
    assert CollectorPauses().summary() == {"collections": 0, "full": 0, "longest_ms": 0.0, "total_ms": 0.0}
