"""SIGINT and SIGTERM stop a study cleanly; a second one forces the exit.

    first signal   the flag is set; the supervisor sees it within half a second (the simulator before its
                   next step), stops the worker, and raises `Interrupted`, in any phase: a running trial
                   is failed ("interrupted", its MLflow run KILLED) and re-queued; a running
                   re-measurement of the conclusion is dropped (those done are kept in the study, and a
                   rerun resumes from them); the parent run is KILLED, one line says what was saved,
                   and the command exits 128 + the signal (130 SIGINT, 143 SIGTERM)
    second signal  the worker is killed and the process exits at once, with the same code

The worker process ignores both (`executors.supervisor`): a Ctrl-C in a terminal reaches the whole process
group, and only the parent decides what happens to a trial.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterator

__all__ = ["Interrupted", "Interrupts"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(Exception):
    """A signal asked the study to stop; raised where the work can stop cleanly."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")

    def __reduce__(self) -> tuple[type[Interrupted], tuple[int]]:
        """Rebuilt from its signal: raised in a forked worker (`executors.parallel`), it is pickled back to the
        parent, where the default (the message as the only argument) would fail in the pool's result thread."""
        return Interrupted, (self.signum,)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class Interrupts:
    """The signal flag a study polls. `on_force` runs before a forced exit (it kills the worker)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.on_force: Callable[[], None] = lambda: None

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def check(self) -> None:
        """Raise `Interrupted` once a signal came."""
        if self.signum is not None:
            raise Interrupted(self.signum)

    def _handle(self, signum: int, _frame: object) -> None:
        if self.signum is None:
            self.signum = signum
            print(f"{signal.Signals(signum).name}: stopping now; what was measured is kept, the running measurement "
                  "is dropped (a rerun measures it again); again to exit at once", file=sys.stderr, flush=True)
            return
        print(f"{signal.Signals(signum).name} again: exiting now; the running trial stays RUNNING until its "
              "heartbeat goes stale (a rerun then retries it)", file=sys.stderr, flush=True)
        self.on_force()
        os._exit(Interrupted(self.signum).exit_code)

    @contextlib.contextmanager
    def installed(self) -> Iterator[Interrupts]:
        """Handle SIGINT and SIGTERM in this block (the main thread's), then restore the previous handlers."""
        previous = {s: signal.signal(s, self._handle) for s in SIGNALS}
        try:
            yield self
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)


def ignore_in_worker() -> None:
    """The worker leaves both signals to the parent, which stops it."""
    for s in SIGNALS:
        signal.signal(s, signal.SIG_IGN)
