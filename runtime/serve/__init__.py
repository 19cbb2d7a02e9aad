"""pagetune's OpenAI-compatible server: `python -m runtime.serve --config best.yaml` (or `--model NAME`).

    cli           the command line: the config loaded and checked against this machine, uvicorn started
    app           the FastAPI routes: completions, chat, models, health, metrics; OpenAI's error shape
    protocol      request bodies (pydantic), response and SSE chunk shapes, token-id text for tokenizer-less models
    async_engine  the engine on its own thread, a queue per request, aborts, the in-flight bound (503)
    metrics       the Prometheus text: TTFT, TPOT, E2E histograms, running/waiting, KV use, preemptions

Needs fastapi and uvicorn (the rest of the runtime does not import this package).
"""
