"""Executors: what runs a trial's measurement (`tuner.measure`) and where.

    base          the Executor protocol (describe, run, close), WorkerStartError: what the study imports
    selection     which executor runs the trials and which re-measures (executor.kind, tuner.fidelity)
    supervisor    parent side of the worker process: timeouts, deaths, a signal (torch-free)
    worker        the worker process loop
    run           one trial in the worker: weights, quality guardrail, engine, warm-up, measurement
    quality       the guardrail for numerics-changing knobs; probes: its fixed prompt set
    sim           SimExecutor: trials on the simulator, in-process
    parallel      independent simulated measurements side by side in forked processes
    http          HttpExecutor: a deployed server (or a deployment's replicas) measured over HTTP, in the parent
    server_process, servers   a server child process; a trial's servers started, measured over HTTP, stopped
    vllm, vllm_probe          executor=vllm: each trial on `vllm serve`
    replicas      ReplicasExecutor: executor real with devices > 1, each trial's replicas `python -m runtime.serve`
"""
