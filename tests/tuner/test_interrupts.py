"""The stop a signal asks for, as the study raises it."""

from __future__ import annotations

import pickle
import signal

from tuner.interrupts import Interrupted


def test_a_stop_survives_pickling_as_from_a_forked_worker():
    back = pickle.loads(pickle.dumps(Interrupted(signal.SIGTERM)))
    assert (type(back), back.signum, back.exit_code, str(back)) == (Interrupted, 15, 143, "interrupted by SIGTERM")
