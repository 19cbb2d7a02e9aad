"""Benchmarks and studies of pagetune, run from the repository root as `python -m experiments.NAME`.

Shared modules (the scripts import these, never each other's internals where one of these holds it):

    record      --record/--results, a result's header (date, device, versions, command), appending it
    timing      GPU timing (`time_ms`), the device copy ceiling, a phase timer for profilers
    windows     the shared traces' windows and their requests as a profile's model takes them
    sim_lab     the simulator experiments' configs, one config simulated, the real runs measured and merged

`RESULTS.md` holds the current figure for each question, each with its command; `results/` the files it cites.
"""
