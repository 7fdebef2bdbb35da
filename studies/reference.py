"""A study's fixed hypervolume reference point, in raw objective units.

The hypervolume of a study's front is taken against a reference point stored when the study is
created (``StudyKey.REFERENCE``): the task's chance level for accuracy, the constraints or the
space's largest model for the costs. How the values are scaled against it, and the hypervolume
itself, are ``studies.pareto``'s.
"""

from __future__ import annotations

from typing import Any, Literal

from nas.tasks import TaskGeometry
from search_spaces import SearchSpace
from studies._trials import suggest
from studies.smoke import Smoke
from studies.spec import StudySpec

__all__ = ["largest_cost", "study_reference", "uniform_chance"]


def uniform_chance(geometry: TaskGeometry) -> float:
    """The accuracy of guessing uniformly among a task's outputs (a caption task: 0), the
    reference accuracy where the task's own chance level is not known (a cost-only geometry,
    a geometry a test or benchmark passes in, a study created before references were stored)."""
    return 0.0 if geometry.kind == "caption" else 1.0 / max(1, geometry.num_outputs)


#: Values tried per knob when searching a space's largest model (a longer range: its ends).
_LARGEST_CHOICES = 16


def largest_cost(space: SearchSpace, geometry: TaskGeometry,
                 key: Literal["params", "madds"], smoke: Smoke | None = None) -> int:
    """The largest ``key`` (params or MAdds) of an architecture of ``space`` on ``geometry``,
    found on the meta device by coordinate ascent: from every knob at its first value, each knob
    in turn takes the value (every choice, or a range's ends) that makes the model largest,
    until no knob changes. Exact for a space whose cost grows with each knob separately (as
    widths, depths, groups and sharing do), a local maximum otherwise."""
    from optuna.trial import FixedTrial

    from nas.cost import estimate_cost, estimate_params

    measure = (estimate_params if key == "params"
               else lambda config, geometry: estimate_cost(config, geometry).madds)
    candidates = {k: (list(d.values()) if len(d.values()) <= _LARGEST_CHOICES
                      else [d.values()[0], d.values()[-1]]) for k, d in space.arch.items()}
    train = {k: d.values()[0] for k, d in space.train.items()}
    costs: dict[str, int] = {}

    def size(params: dict[str, Any]) -> int:
        config, _ = suggest(space, FixedTrial({**params, **train}), smoke)
        if config.arch_id not in costs:
            costs[config.arch_id] = int(measure(config, geometry))
        return costs[config.arch_id]

    point = {k: values[0] for k, values in candidates.items()}
    best, changed = size(point), True
    while changed:
        changed = False
        for knob, values in candidates.items():
            for value in values:
                trial = {**point, knob: value}
                got = size(trial)
                if got > best:
                    point, best, changed = trial, got, True
    return best


def study_reference(spec: StudySpec, space: SearchSpace, geometry: TaskGeometry,
                    chance: float) -> list[float | None]:
    """The fixed hypervolume reference point of a study, in raw objective units, one entry per
    objective (see ``studies.pareto``): accuracy at the task's ``chance`` level; params and
    MAdds at ``params_max`` / ``madds_max`` where constrained, else the space's largest model
    (:func:`largest_cost`); latency at ``latency_ms_max``, else ``None`` (derived from the
    trials: it cannot be known before one is measured)."""
    out: list[float | None] = []
    for objective in spec.objectives:
        name = objective.name
        limit = spec.constraints.get(f"{name}_max")
        if objective.source == "metric":
            out.append(float(chance))
        elif limit is not None:
            out.append(float(limit))
        elif objective.source == "cost":
            out.append(float(largest_cost(space, geometry, "params" if name == "params"
                                          else "madds", spec.smoke)))
        else:
            out.append(None)
    return out
