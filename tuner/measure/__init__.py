"""Measuring: how a trial's configuration is measured on a traffic window, whatever runs it. Pure (no
processes, no torch): an executor (`tuner.executors`) hands it a replay function and gets a measurement.

    job          TrialJob, MeasurePlan, TrialOutcome, Measurement, Probe ... (what crosses the worker's pipe)
    plan         a trial's MeasurePlan from the study's settings; Rates: a rate scale in req/s
    measure      probes repeated to a majority, capacity bracketed then bisected, the edge checked below
    window       WindowReplayer (the window at a rate scale) and measure_window, the one entry every executor calls
    replay       open-loop replay through an engine, a clock that skips idle gaps; engine_replay
    http_replay  the same open-loop replay over HTTP to an OpenAI-compatible server
    metrics      per-replay metrics and the SLO verdict of a replay
    timeline     what a replay recorded: per-request timelines, the engine's totals
    outcome      a measured outcome, a failure in one line, the metrics a trial records
"""
