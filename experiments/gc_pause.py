"""How long Python's full collection pauses a process that serves an engine, with its startup heap frozen and not.

    python -m experiments.gc_pause [--model tiny] [--repeats 5]

Builds the engine on the preset (on the GPU where there is one, warmed up as served), imports what the tuner's
replay and the server import, then times `gc.collect()` (all generations: the pause an oldest-generation
collection puts between two steps) `--repeats` times, then again inside `runtime.frozen_heap()`. Medians, ms.
"""

from __future__ import annotations

import argparse
import gc
import statistics


def pauses(repeats: int) -> list[float]:
    """ms of each of `repeats` full collections, as `runtime.CollectorPauses` records them."""
    from runtime import CollectorPauses

    with CollectorPauses() as recorded:
        for _ in range(repeats):
            gc.collect()
    return [1e3 * seconds for _, seconds in recorded.pauses]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    import runtime.serve.app  # noqa: F401  what a serving process imports besides the engine
    import tuner.measure.replay  # noqa: F401
    from runtime import EngineConfig, LLMEngine, frozen_heap
    from runtime.warmup import warm_up

    engine = LLMEngine(EngineConfig.from_flat(args.model))
    if engine.runner_on_gpu:
        warm_up(engine)
    tracked = len(gc.get_objects())
    plain = pauses(args.repeats)
    with frozen_heap() as frozen:
        kept = pauses(args.repeats)
    print(f"{args.model} on {engine.runner.device}: {tracked:,} objects tracked, {frozen:,} frozen")
    print(f"full collection: {statistics.median(plain):.1f} ms (max {max(plain):.1f}) as is; "
          f"{statistics.median(kept):.2f} ms (max {max(kept):.2f}) with the startup heap frozen")


if __name__ == "__main__":
    main()
