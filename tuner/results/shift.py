"""A config whose measured value moved several-fold between the search window and the held-out one: the two
windows are different loads for it (grouped arrivals, long prompts, a burst), and the verdict speaks of the
held-out window's traffic. Said in report.md's notes, with the held-out window's grouped arrivals where it has
them, so a verdict like "+2,000%" reads as what it is."""

from __future__ import annotations

from tuner.results.conclude import Conclusion

__all__ = ["SHIFT", "window_shift_notes"]

SHIFT = 3.0  # a proof median this many times above or below the same config's selection median is said


def window_shift_notes(c: Conclusion, held_out_arrivals: str = "") -> list[str]:
    """One note per config whose held-out median is over SHIFT times, or under 1 / SHIFT of, its search-window
    median; `held_out_arrivals` (the held-out window's grouped arrivals line, or "") is added to them."""
    if c.no_capacity is not None or c.proof.window != "validation":
        return []
    notes = []
    for label in c.proof.values:
        proof, search = c.proof.median(label), c.selection.median(label)
        if not proof or not search or 1 / SHIFT <= proof / search <= SHIFT:
            continue
        notes.append(f"{label}: {proof:.4g} {c.unit} on the held-out window against {search:.4g} on the search "
                     f"window (x{proof / search:.2g}): the two windows are different loads for this config, so the "
                     "verdict speaks of the held-out window's traffic"
                     + (f"; held-out arrivals: {held_out_arrivals}" if held_out_arrivals else ""))
    return notes
