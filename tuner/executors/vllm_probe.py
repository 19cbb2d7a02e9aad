"""What the vLLM in this Python is: its version, the device it would serve on, its engine argument list.

Run as a script with vLLM's Python (`python tuner/executors/vllm_probe.py`): it imports nothing of pagetune, so
vLLM may live in another environment (`executor.vllm.probe`). Prints one JSON object on the last line of stdout
(vLLM's own logs go to stderr meanwhile):

    {"version": "0.26.0", "device": {"type": "cuda", "name": "NVIDIA H200", "memory_gb": 139.8},
     "args": {dest: {"flags": [...], "action": ..., "choices": [...] | null, "type": ..., "nargs": ...}}}

Without vLLM it exits with NO_VLLM and prints the import error on stderr.
"""

from __future__ import annotations

import contextlib
import json
import sys

NO_VLLM = 3


def argument_list() -> dict[str, dict]:
    """EngineArgs' options as `vllm serve` parses them (tuner/data/vllm-VERSION-args.json has this shape)."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    out = {}
    for action in parser._actions:
        flags = [s for s in action.option_strings if s.startswith("--")]
        if flags and action.dest != "help":
            out[action.dest] = {"flags": flags, "action": type(action).__name__,
                                "choices": None if action.choices is None else sorted(map(str, action.choices)),
                                "type": getattr(action.type, "__name__", None), "nargs": action.nargs}
    return out


def device() -> dict:
    import torch

    if not torch.cuda.is_available():
        return {"type": "cpu", "name": "cpu", "memory_gb": None}
    props = torch.cuda.get_device_properties(0)
    return {"type": "cuda", "name": props.name, "memory_gb": round(props.total_memory / 2**30, 1)}


def main() -> int:
    out = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):  # vLLM logs to stdout (VLLM_LOGGING_STREAM): keep it off the JSON
        try:
            import vllm
        except ImportError as e:
            print(f"{type(e).__name__}: {e}", file=sys.stderr)
            return NO_VLLM
        probe = {"version": vllm.__version__, "device": device(), "args": argument_list()}
    out.write("\n" + json.dumps(probe) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
