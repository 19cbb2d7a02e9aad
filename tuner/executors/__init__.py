"""Executors: what runs a trial's measurement (`tuner.measure`) and where.

    base          the Executor protocol (describe, run, close), WorkerStartError: what the study imports
    selection     which executor runs the trials and which re-measures (executor.kind, tuner.fidelity)
    supervisor    parent side of the worker process: timeouts, deaths, a signal (torch-free)
    worker        the worker process loop
    run           one trial in the worker: weights, quality guardrail, engine, warm-up, measurement
    quality       the guardrail for numerics-changing knobs; probes: its fixed prompt set
    sim           SimExecutor: trials on the simulator, in-process
    parallel      independent simulated measurements side by side in forked processes
    http          HttpExecutor: a deployed server measured over HTTP, in the parent
    vllm, vllm_server, vllm_probe   executor=vllm: each trial on `vllm serve`, measured over HTTP
"""
