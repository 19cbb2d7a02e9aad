"""`python -m tuner +traffic=logs.jsonl [overrides]` (Hydra 1.3; `--help`, `--cfg job` work as usual)."""

from __future__ import annotations

import gc
import sys

import hydra
from omegaconf import DictConfig

from tuner.config import CONF_DIR, AppConfig
from tuner.schema import unknown_override


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from tuner.app import run  # imported here so `--help` and `--cfg` stay fast

    code = run(cfg)
    gc.freeze()  # the heap goes with the process: a collection at exit took seconds after a SIGTERM's last line
    if code:
        sys.exit(code)


def _check_keys() -> None:
    """A mistyped key (`tuner.n_trial=6`) stops here, naming the key meant, before Hydra composes anything."""
    groups = {p.name for p in CONF_DIR.iterdir() if p.is_dir()}
    message = unknown_override(sys.argv[1:], AppConfig, groups)
    if message is not None:
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    _check_keys()
    try:
        main()
    except KeyboardInterrupt:  # Ctrl-C while starting, before the study's own handler (tuner.interrupts) is up
        print("interrupted (SIGINT) before the first trial", file=sys.stderr)
        sys.exit(130)
