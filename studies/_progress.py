"""The progress of a running study: one updating line in a terminal, plain lines otherwise.

trials finished of the budget, running, rejected, hypervolume (against the study's fixed
reference point, see ``studies.pareto``), elapsed time and ETA. The hypervolume is recomputed only
when a trial completes; the ETA extrapolates the mean time per counted trial.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from studies.pareto import Reference, normalized_hypervolume

__all__ = ["Progress"]


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes = f"{rest // 60:02d}:{rest % 60:02d}"
    return f"{hours}:{minutes}" if hours else minutes


class Progress:
    """Shows ``counted/budget | running | rejected | hypervolume | elapsed | ETA``."""

    def __init__(self, budget: int, directions: list[str], *, enabled: bool = True,
                 stream: TextIO | None = None, counted_at_start: int = 0,
                 reference: Reference | None = None) -> None:
        self.budget, self.directions, self.enabled = budget, directions, enabled
        self.reference = reference
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.start = time.monotonic()
        self.counted_at_start = counted_at_start
        self.hv, self.hv_points = 0.0, -1
        self.last, self.last_time = "", 0.0
        self.pending: tuple[int, int, int, list[list[float]]] | None = None

    def line(self, counted: int, running: int, rejected: int, values: list[list[float]]) -> str:
        if len(values) != self.hv_points:  # only a new complete trial moves it
            self.hv = normalized_hypervolume(values, self.directions, self.reference)
            self.hv_points = len(values)
        elapsed = time.monotonic() - self.start
        done_here = counted - self.counted_at_start
        eta = "?"
        if done_here > 0:
            eta = _clock(elapsed / done_here * max(0, self.budget - counted))
        return (f"trials {counted}/{self.budget} | running {running} | rejected {rejected} | "
                f"hypervolume {self.hv:.4f} | elapsed {_clock(elapsed)} | ETA {eta}")

    def show(self, counted: int, running: int, rejected: int, values: list[list[float]],
             *, tick: bool = False) -> None:
        """Print the line if it changed, at most once a second (``tick``: a timer refresh,
        only in a terminal). Plain lines (not a terminal): one per change of the counts, not
        per second of the clock; a change within a second of the last line waits for the next
        event after it, or for :meth:`close` (the last one, the budget reached, at once)."""
        if not self.enabled or (tick and (not self.tty or time.monotonic() - self.last_time < 1)):
            return
        if counted < self.budget and time.monotonic() - self.last_time < 1:
            self.pending = (counted, running, rejected, values)  # shown by the next or close
            return
        self.pending = None
        line = self.line(counted, running, rejected, values)
        if not self.tty:
            key = line.split(" | elapsed")[0]
            if key == self.last:
                return
            self.last, self.last_time = key, time.monotonic()
            print(line, file=self.stream, flush=True)
            return
        self.last_time = time.monotonic()
        print("\r\x1b[2K" + line, end="", file=self.stream, flush=True)

    def close(self) -> None:
        if self.enabled and self.pending is not None:  # the last change, held back
            counted, running, rejected, values = self.pending
            self.pending, self.last_time = None, 0.0
            self.show(counted, running, rejected, values)
        if self.enabled and self.tty:
            print(file=self.stream, flush=True)
