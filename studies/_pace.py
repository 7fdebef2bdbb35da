"""When the study's searcher may start another trial, and which sampled trials wait.

``Pace`` holds what a Tune searcher over a stored study needs beyond ask, map and tell:

- the trial budget (trials counted, training and waiting must stay below it),
- the deadline (a ``time.monotonic()`` after which no trial starts),
- a halt (why no more trials start: a hopeless space, workers that cannot start),
- a finish (why no more trials start although nothing went wrong: the study converged),
- the twins: a trial sampled with the result key (architecture and settings) of a trial in
  flight waits for that trial's result; once it ends, the twin reuses its result (it
  completed) or trains itself (it did not).

It writes nothing: the searcher tells the study what becomes of each trial.
"""

from __future__ import annotations

import math
import time
from collections.abc import Container
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

__all__ = ["MAX_REJECTED_IN_A_ROW", "Pace"]

# A space whose every draw breaks the constraints would otherwise be sampled forever.
MAX_REJECTED_IN_A_ROW = 200


class _Keyed(Protocol):
    @property
    def key(self) -> str: ...


C = TypeVar("C", bound=_Keyed)


@dataclass
class Pace(Generic[C]):
    """The budget, deadline, halt and waiting twins of one run (see the module's note)."""

    budget: int
    deadline: float = math.inf
    halted: str = ""
    finished: str = ""
    rejected_in_a_row: int = 0
    in_flight: dict[str, int] = field(default_factory=dict)  # result key -> trial training it
    deferred: list[C] = field(default_factory=list)  # twins waiting for a trial in flight
    ready: list[C] = field(default_factory=list)  # twins whose leader did not complete

    def closed(self) -> bool:
        """No trial starts any more: halted, finished, or past the deadline."""
        return bool(self.halted or self.finished) or time.monotonic() > self.deadline

    def room(self, counted: int, training: int) -> bool:
        """Another trial may be sampled: ``counted`` ones, ``training`` ones and the waiting
        twins stay below the budget."""
        return counted + training + len(self.deferred) < self.budget

    def waiting(self) -> bool:
        """Twins wait for a trial in flight (whose failure would send them to train)."""
        return bool(self.deferred)

    def started(self, key: str, number: int) -> None:
        self.in_flight[key] = number

    def ended(self, key: str) -> None:
        self.in_flight.pop(key, None)

    def defer(self, candidate: C) -> bool:
        """Keep ``candidate`` waiting when a trial with its result key is in flight."""
        if candidate.key in self.in_flight:
            self.deferred.append(candidate)
            return True
        return False

    def release(self, known: Container[str]) -> list[C]:
        """Twins whose leader ended: those whose result is ``known`` are returned (to be
        reused); the others become ready to train."""
        waiting, reuse = [], []
        for candidate in self.deferred:
            if candidate.key in self.in_flight:
                waiting.append(candidate)
            elif candidate.key in known:
                reuse.append(candidate)
            else:
                self.ready.append(candidate)
        self.deferred = waiting
        return reuse

    def next_ready(self) -> C | None:
        return self.ready.pop(0) if self.ready else None

    def take_ready(self) -> list[C]:
        ready, self.ready = self.ready, []
        return ready

    def take_all(self) -> list[C]:
        """Every twin still waiting or ready (the run ends), emptied."""
        out, self.deferred, self.ready = [*self.deferred, *self.ready], [], []
        return out

    def accepted(self) -> None:
        """A sampled architecture met the constraints."""
        self.rejected_in_a_row = 0

    def rejected(self, study: str, reason: str) -> None:
        """A sampled architecture broke a constraint; after ``MAX_REJECTED_IN_A_ROW`` in a row
        the run halts."""
        self.rejected_in_a_row += 1
        if self.rejected_in_a_row >= MAX_REJECTED_IN_A_ROW:
            self.halted = (
                f"Study {study!r}: {self.rejected_in_a_row} architectures in a row were "
                f"rejected (the last: {reason}); loosen `constraints` or narrow the space.")

    def halt(self, reason: str) -> None:
        self.halted = reason

    def finish(self, reason: str) -> None:
        """No more trials start, the run ending as it should (``reason``: why)."""
        self.finished = reason
