"""Trials: what a study runs for each configuration, isolated in a worker process.

    job         TrialJob, MeasurePlan, TrialOutcome, Measurement, Probe ... (torch-free, what crosses the pipe)
    measure     the measurement: probes repeated to a majority, capacity bracketed then bisected (pure)
    metrics     per-replay metrics and the SLO verdict of a replay (pure)
    timeline    what a replay recorded: per-request timelines, the engine's totals
    supervisor  parent side: the worker process, timeouts, deaths (torch-free); the Executor protocol
    worker      the worker process loop
    run         one trial in the worker: weights, quality guardrail, engine, warm-up, measurement
    replay      open-loop replay with a clock that skips idle gaps
    quality     the guardrail for numerics-changing knobs
    vllm_executor, vllm_server, vllm_probe   executor=vllm: each trial on `vllm serve`, measured over HTTP
"""
