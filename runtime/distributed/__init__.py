"""Tensor parallelism: one process per rank, rank 0 the engine (see `backend` for a step's walk).

    group.py    the collectives (NCCL on GPUs, gloo on CPU) and the NVLink-multicast switches
    step.py     a step as rank 0 sends it to the other ranks
    worker.py   a rank other than 0: its shard, its KV pool, its loop
    ranks.py    rank 0's side: the ranks started, watched, stopped; `RankFailedError`
    backend.py  the tensor-parallel `Backend` and `ParallelRunner`

The model's cut is `runtime.model.parallel`.
"""
