"""The server's command line.

    python -m runtime.serve --config best.yaml [--host 127.0.0.1] [--port 8000] [--force] [--max-pending N]
                            [--engine-mode process|thread]
    python -m runtime.serve --model smollm2-135m              # a plain start: the runtime's defaults

A tuned config is refused when it was measured for another model, or on other hardware than this
machine's (its knobs, memory share and batch sizes first, were chosen there): the message says which,
and `--force` serves it anyway. `--model` with `--config` serves that config's knobs on another model
(refused unless `--force`, as it is another model).

`--engine-mode process` (the default) runs the engine in a child process (`serve.engine_process`): the
server's HTTP and streaming work then runs beside the engine's steps instead of taking turns with them
under one interpreter lock. `--engine-mode thread` steps it on a thread of the server's process
(`serve.engine_thread`), to compare. A config, memory or model error while loading is one line on
stderr and exit code 2, in either mode, before the port is bound.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from runtime.config import ConfigError, EngineConfig, ModelConfig

if TYPE_CHECKING:
    from runtime.serve.engine_core import EngineHandle

__all__ = ["ENGINE_MODES", "deployment_problems", "load_config", "main", "start_engine"]

ENGINE_MODES = ("process", "thread")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m runtime.serve", description="pagetune's OpenAI-compatible server")
    p.add_argument("--config", help="a runtime YAML: a pagetune best.yaml, or any EngineConfig mapping")
    p.add_argument("--model", help="the model to serve (a preset, .gguf file or folder); alone: default knobs")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--force", action="store_true", help="serve a config tuned for another model or hardware")
    p.add_argument("--max-pending", type=int, default=None,
                   help="requests in flight (running + waiting) beyond which the server answers 503; "
                        "default 4 x scheduler.max_num_seqs")
    p.add_argument("--engine-mode", choices=ENGINE_MODES, default="process",
                   help="process (the default): the engine in a child process, its own interpreter lock (the "
                        "HTTP side's work does not slow its steps); thread: on a thread of the server's process")
    p.add_argument("--log-level", default="info")
    return p


def deployment_problems(config: EngineConfig, model: str | None, hardware: str) -> list[str]:
    """Why `config` (tuned, with best.yaml's metadata) should not serve `model` on `hardware`; [] when fine."""
    meta = config.metadata or {}
    tuned_model = meta.get("model", config.model.name)
    serving = model or config.model.name
    problems = []
    if tuned_model != serving:
        problems.append(f"it was tuned for model {tuned_model!r}, not {serving!r}")
    tuned_hardware = meta.get("hardware")
    if tuned_hardware is not None and tuned_hardware != hardware:
        problems.append(f"it was tuned on {tuned_hardware!r}, and this machine is {hardware!r}")
    return problems


def load_config(path: str | None, model: str | None, force: bool,
                hardware: Callable[[EngineConfig], str]) -> EngineConfig:
    """The config to serve; a ConfigError says why a tuned one is refused (unless `force`). `hardware`:
    what the config's device is here (`describe_device(config).hardware`)."""
    if path is None:
        if model is None:
            raise ConfigError("pass --config best.yaml, or --model NAME for a plain start")
        return EngineConfig(model=ModelConfig(name=model))
    config = EngineConfig.from_yaml(path)
    problems = deployment_problems(config, model, hardware(config))
    if problems and not force:
        raise ConfigError(f"{path}: refusing to serve it: {'; '.join(problems)}. Its knobs were measured there: "
                          "tune again here (python -m tuner), or pass --force to serve it anyway")
    return config if model is None else replace(config, model=replace(config.model, name=model))


def start_engine(config: EngineConfig, mode: str, model: Any = None) -> EngineHandle:
    """The engine for `config`, loaded, in `mode` (ENGINE_MODES); `model`: weights already loaded in this
    process to reuse (thread mode only). Raises ConfigError (memory, model, config) or EngineStartError."""
    if mode == "process":
        if model is not None:
            raise ValueError("weights loaded in this process cannot serve an engine process: use mode='thread'")
        from runtime.serve.engine_process import EngineProcess

        return EngineProcess(config)
    from runtime.engine import LLMEngine
    from runtime.serve.engine_thread import EngineThread

    return EngineThread(LLMEngine(config, model=model))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    import uvicorn  # the server's dependencies, and torch, only once the arguments are read

    from runtime.device import describe_device
    from runtime.model.tokenizer import load_tokenizer
    from runtime.serve.app import build_app
    from runtime.serve.engine_process import EngineStartError

    try:
        config = load_config(args.config, args.model, args.force, lambda c: describe_device(c).hardware)
        tokenizer = load_tokenizer(config.model.name)
        handle = start_engine(config, args.engine_mode)
    except (ConfigError, EngineStartError) as e:  # InsufficientMemoryError and ModelLoadError included
        print(f"error: {e}", file=sys.stderr)
        return 2
    max_pending = args.max_pending or 4 * config.scheduler.max_num_seqs
    print(f"serving {config.model.name} (max_model_len {handle.limits.max_model_len}, engine in a "
          f"{args.engine_mode}) on http://{args.host}:{args.port}/v1; 503 beyond {max_pending} requests in flight",
          flush=True)
    try:
        uvicorn.run(build_app(handle, config.model.name, tokenizer, max_pending), host=args.host, port=args.port,
                    log_level=args.log_level)
    finally:  # also when uvicorn stops before its lifespan (a port in use): no engine process left behind
        handle.close()
    return 0
