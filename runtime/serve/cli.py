"""The server's command line.

    python -m runtime.serve --config best.yaml [--host 127.0.0.1] [--port 8000] [--force] [--max-pending N]
    python -m runtime.serve --model smollm2-135m              # a plain start: the runtime's defaults

A tuned config is refused when it was measured for another model, or on other hardware than this
machine's (its knobs, memory share and batch sizes first, were chosen there): the message says which,
and `--force` serves it anyway. `--model` with `--config` serves that config's knobs on another model
(refused unless `--force`, as it is another model).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import replace

from runtime.config import ConfigError, EngineConfig, ModelConfig

__all__ = ["deployment_problems", "load_config", "main"]


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


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    import uvicorn  # the server's dependencies, and torch, only once the arguments are read

    from runtime.device import describe_device
    from runtime.engine import LLMEngine
    from runtime.model.tokenizer import load_tokenizer
    from runtime.serve.app import build_app

    try:
        config = load_config(args.config, args.model, args.force, lambda c: describe_device(c).hardware)
        engine = LLMEngine(config, tokenizer=load_tokenizer(config.model.name))
    except ConfigError as e:  # InsufficientMemoryError and ModelLoadError included
        print(f"error: {e}", file=sys.stderr)
        return 2
    max_pending = args.max_pending or 4 * config.scheduler.max_num_seqs
    print(f"serving {config.model.name} (max_model_len {engine.max_model_len}) on http://{args.host}:{args.port}/v1; "
          f"503 beyond {max_pending} requests in flight", flush=True)
    uvicorn.run(build_app(engine, max_pending), host=args.host, port=args.port, log_level=args.log_level)
    return 0
