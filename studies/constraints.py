"""A sampled architecture's cost against the study's constraints, on the meta device.

``broken_constraints`` and ``violations`` decide a rejection before any training (latency is
measured after training and checked then); ``cost_dict`` is the cost as the trial stores it
(``TrialKey.COST``). No torch here: the caller computes the cost (``nas.cost.estimate_cost``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nas.cost import Cost
    from studies.spec import StudySpec

__all__ = ["broken_bounds", "broken_constraints", "cost_dict", "violations"]


def cost_dict(cost: Cost) -> dict[str, Any]:
    """The cost as a trial stores it: totals and their split by part."""
    return {"params": cost.params, "params_matrix": cost.params_matrix, "madds": cost.madds,
            "parts": {k: vars(v) for k, v in cost.parts.items()}}


def broken_constraints(spec: StudySpec, cost: Cost) -> list[str]:
    """The constraint keys (``params_max``, ...) that ``cost`` breaks; latency is measured
    after training and checked then."""
    return broken_bounds(spec.constraints, {"params": cost.params, "madds": cost.madds})


def broken_bounds(constraints: Mapping[str, float], values: Mapping[str, float]) -> list[str]:
    """The constraint keys (``params_max``, ...) whose quantity ``values`` holds and breaks; a
    quantity it does not hold (latency, measured after training) is not checked."""
    out = []
    for key, limit in constraints.items():
        name, bound = key.rsplit("_", 1)
        value = values.get(name)
        if value is None:
            continue
        if (bound == "max" and value > limit) or (bound == "min" and value < limit):
            out.append(key)
    return out


def violations(spec: StudySpec, cost: Cost) -> str | None:
    """The first constraint ``cost`` breaks, as a phrase; None when it meets them all."""
    for key in broken_constraints(spec, cost):
        name = key.rsplit("_", 1)[0]
        return f"{name} {getattr(cost, name):,} breaks {key}={spec.constraints[key]:,.0f}"
    return None
