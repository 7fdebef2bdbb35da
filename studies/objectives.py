"""The objectives a study may name, declared once: name, default direction, and source.

A study file lists some of :data:`OBJECTIVES` (``studies.spec``); the sampler, the searcher,
the CLI, the dashboard and the exports read them from here. ``accuracy`` is the task's metric
(accuracy, VQA accuracy, CIDEr-D).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

__all__ = ["OBJECTIVES", "Direction", "Objective", "Source", "objective_values"]

Direction = Literal["minimize", "maximize"]
#: Where an objective's value comes from: the trainer's metric (``value`` of the final report),
#: the cost model on the meta device (before training), or a measurement after training.
Source = Literal["metric", "cost", "measured"]


@dataclass(frozen=True)
class Objective:
    """One objective of a study: its name, the direction it is optimised in, and where its
    value comes from (see :data:`Source`)."""

    name: str
    direction: Direction
    source: Source

    def value(self, cost: Mapping[str, Any], result: Mapping[str, Any]) -> Any:
        """This objective's value for a trial with ``cost`` (``TrialKey.COST``) whose final
        report is ``result`` (as the value arrived: unchecked)."""
        if self.source == "metric":
            return result.get("value")
        if self.source == "cost":
            return cost.get(self.name)
        return result.get(self.name)


#: The objectives a study may name, each with its default direction.
OBJECTIVES: Final[Mapping[str, Objective]] = {
    o.name: o for o in (
        Objective("accuracy", "maximize", "metric"),
        Objective("params", "minimize", "cost"),
        Objective("madds", "minimize", "cost"),
        Objective("latency_ms", "minimize", "measured"),
    )
}


def objective_values(objectives: Sequence[Objective], cost: Mapping[str, Any],
                     result: Mapping[str, Any]) -> list[float] | str:
    """A trial's objective vector, in the study's order, or why there is none (a value missing
    or not finite)."""
    out = []
    for o in objectives:
        value = o.value(cost, result)
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            return f"the evaluator returned {o.name}={value!r}"
        out.append(float(value))
    return out
