"""A result as the experiments write it: `--record`/`--results`, a header naming the date, device, versions
and the command, and appending it to the results file."""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path


def add_record_args(parser: argparse.ArgumentParser) -> None:
    """--record (append the table to --results) and --results, shared by every benchmark script."""
    parser.add_argument("--record", action="store_true", help="append the table to --results")
    parser.add_argument("--results", type=Path, default=Path("experiments/RESULTS.md"))


def command_line() -> str:
    """The command that runs this process, as typed from the repository root: `python -m experiments.NAME ...`
    for a module run with -m."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    script = f"-m {spec.name}" if spec is not None else sys.argv[0]
    return " ".join(["python", script, *sys.argv[1:]])


def header(title: str) -> str:
    import platform

    import torch
    import triton

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU {platform.machine()}"
    return (
        f"## {title}\n\n{datetime.date.today().isoformat()}, {device}, "
        f"torch {torch.__version__}, triton {triton.__version__}.\n"
        f"Command: `{command_line()}`\n"
    )


def emit(table: str, args: argparse.Namespace, title: str) -> None:
    """Print a result table and, with --record, append it to --results under its header (date, device,
    versions, command)."""
    print(table)
    if args.record:
        record(header(title) + "\n" + table + "\n", args.results)


def record(text: str, results: Path) -> None:
    if not results.exists():
        results.write_text("# Measured results (every figure the docs quote: date, hardware, command)\n")
    with results.open("a") as f:
        f.write("\n" + text)
