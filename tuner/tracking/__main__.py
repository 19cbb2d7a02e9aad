"""`python -m tuner.tracking FALLBACK --uri URI`: a study's tracking fallback file re-sent to MLflow
(`tracking.resend`), from the first line not yet written."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tuner.redact import mask_url
from tuner.tracking.payloads import TrackingError
from tuner.tracking.resend import lines_resent, resend
from tuner.tracking.tracker import Tracker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tuner.tracking",
                                     description="Re-send a tracking fallback file to MLflow.")
    parser.add_argument("fallback", type=Path, help="tracking-fallback.jsonl of a study's output folder")
    parser.add_argument("--uri", required=True, help="the MLflow tracking URI to write to")
    parser.add_argument("--experiment", default="pagetune", help="MLflow experiment (tracking.experiment)")
    args = parser.parse_args(argv)
    try:
        written = resend(args.fallback, Tracker(args.uri, args.experiment).check()).written
    except (TrackingError, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"replayed {written} records of {args.fallback} into {mask_url(args.uri)} "
          f"({lines_resent(args.fallback)} in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
