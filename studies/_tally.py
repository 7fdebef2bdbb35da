"""How a study's trials ended, counted: the one count the searcher and its progress line read.

Built from the stored trials when a run starts, then written only by the searcher's tell path
(``StudySearcher``, as it records each ending through ``studies.store``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from optuna.trial import FrozenTrial, TrialState

from studies._trials import counted_trials
from studies.store.keys import COUNTED_EXCLUDED, Status, TrialKey

__all__ = ["Tally"]


@dataclass
class Tally:
    """Trials by status word, the objective vectors of those that completed (reused ones
    included), and how many count against the budget (``studies._trials.counted_trials``)."""

    statuses: Counter[str | None] = field(default_factory=Counter)  # None: no word stored
    values: list[list[float]] = field(default_factory=list)
    counted: int = 0

    @classmethod
    def of(cls, trials: Iterable[FrozenTrial]) -> Tally:
        """The tally of trials already stored (a resumed study's)."""
        trials = list(trials)
        return cls(Counter(t.user_attrs.get(TrialKey.STATUS) for t in trials
                           if t.state.is_finished()),
                   [list(t.values) for t in trials if t.state == TrialState.COMPLETE],
                   counted_trials(trials))

    def add(self, status: str, values: Sequence[float] | None = None) -> None:
        """One trial told as ``status`` (with its objective values when it completed)."""
        self.statuses[status] += 1
        if values is not None:
            self.values.append(list(values))
        if status not in COUNTED_EXCLUDED:
            self.counted += 1

    @property
    def rejected(self) -> int:
        return self.statuses[Status.REJECTED]
