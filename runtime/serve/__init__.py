"""pagetune's OpenAI-compatible server: `python -m runtime.serve --config best.yaml` (or `--model NAME`).

    cli             the command line: the config loaded and checked against this machine, the engine started
                    (--engine-mode process, the default, or thread), uvicorn started
    app             the FastAPI routes: completions, chat, models, health, metrics; OpenAI's error shape
    protocol        request bodies (pydantic), response and SSE chunk shapes, token-id text for tokenizer-less models
    streams         token deltas to text (stop strings cut there), a request's n choices, SSE chunk events
                    from a per-choice template
    logprobs        logprobs in OpenAI's chat and completions shapes
    async_engine    the HTTP side of the engine: a queue per request, aborts, the in-flight bound (503), health
    engine_core     what crosses between the two sides (commands in, one message of deltas per step out)
    engine_process  the engine in a spawned child process: its own interpreter lock (the default)
    engine_thread   the engine on a thread of the server's process
    metrics         the Prometheus text: TTFT, TPOT, E2E histograms, running/waiting, KV use, preemptions

Needs fastapi and uvicorn (the rest of the runtime does not import this package).
"""
