"""A front that knows its noise: the seed-to-seed spread of a seeded promotion, and which front
points stand out from it.

``nas promote NAME --seeds N`` trains each chosen trial N times, with N seeds, in the promoted
study (each promoted trial names its source trial, ``TrialKey.SOURCE_TRIAL``, and its seed,
``TrialKey.SEED``). Nothing more is stored: :func:`spreads` computes each source trial's mean,
sample standard deviation, minimum and maximum accuracy over its completed seeds
(:func:`seed_spread` from the promoted study's trials as Optuna stores them, the source of
truth: a resumed promotion counts the seeds it has so far; the dashboard from its own read of
them). The costs (params, MAdds) are deterministic: their spread is 0.

:func:`within_noise` is the test, :func:`noisy_points` applies it to the seeded trials of a
promotion, and :func:`noisy_front` puts them together for a study's front (``nas pareto``; the
dashboard calls :func:`spreads` and :func:`noisy_points` on its own read).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from studies.store import StudyAttrs, StudyStore, UnknownStudyError, trial_attrs

__all__ = ["NoisyPoint", "SeedSpread", "noisy_front", "noisy_points", "seed_spread",
           "spread_of", "spreads", "within_noise"]


@dataclass(frozen=True)
class SeedSpread:
    """One source trial's promoted accuracy over its seeds, and its objective values' means.

    ``std`` is the sample standard deviation (``ddof=1``), ``None`` with fewer than 2 seeds.
    ``means`` holds every objective's mean, in the study's order (the costs are the same in
    every seed).
    """

    source_trial: int
    seeds: int
    mean: float
    std: float | None
    min: float
    max: float
    means: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"source_trial": self.source_trial, "seeds": self.seeds, "mean": self.mean,
                "std": self.std, "min": self.min, "max": self.max}


def spread_of(trials: Sequence[FrozenTrial], objective_names: Sequence[str],
              study: str = "") -> dict[int, SeedSpread]:
    """Each source trial's :class:`SeedSpread` over the completed trials of a promoted study
    (``study`` names it in the error about a stored value that does not parse); empty for a
    study without an accuracy objective."""
    if "accuracy" not in objective_names:
        return {}
    groups: dict[int, list[Sequence[float]]] = defaultdict(list)
    for t in trials:
        if t.state != TrialState.COMPLETE or t.values is None:
            continue
        source = trial_attrs(study, t.number, t.user_attrs).source_trial
        if source is not None:
            groups[source].append(t.values)
    return spreads(groups, objective_names)


def spreads(groups: Mapping[int, Sequence[Sequence[float]]],
            objective_names: Sequence[str]) -> dict[int, SeedSpread]:
    """Each source trial's :class:`SeedSpread` from its seeds' objective vectors (``groups``:
    by source trial number, each vector in the order of ``objective_names``); empty without an
    accuracy objective."""
    names = list(objective_names)
    if "accuracy" not in names:
        return {}
    accuracy = names.index("accuracy")
    out: dict[int, SeedSpread] = {}
    for source, rows in sorted(groups.items()):
        acc = [float(r[accuracy]) for r in rows]
        n, mean = len(acc), math.fsum(acc) / len(acc)
        std = (math.sqrt(math.fsum((a - mean) ** 2 for a in acc) / (n - 1)) if n > 1
               else None)
        means = tuple(math.fsum(float(r[i]) for r in rows) / n for i in range(len(names)))
        out[source] = SeedSpread(source, n, mean, std, min(acc), max(acc), means)
    return out


def seed_spread(name: str, store: StudyStore) -> dict[int, SeedSpread]:
    """The :class:`SeedSpread` of each source trial of promoted study ``name``, read from its
    trials (by source trial number)."""
    attrs, _, trials = store.completed(name)
    return spread_of(trials, attrs.objectives, name)


def within_noise(means: Sequence[Sequence[float]], stds: Sequence[Sequence[float]],
                 directions: Sequence[str]) -> list[int | None]:
    """For each point, the index of a point it does not stand out from, or ``None``.

    Each point has a mean and a standard deviation per objective (``directions``: ``maximize``
    or ``minimize``; a deterministic objective such as params has std 0). Point ``p``'s
    *advantage* over point ``q`` on objective ``k`` is ``a = mean_p - mean_q`` for a maximized
    objective (``mean_q - mean_p`` for a minimized one), and the *noise* between them is
    ``e = sqrt(std_p**2 + std_q**2)``, the standard deviation of the difference of one
    training of each. The advantage is *decisive* when ``a > 0`` and ``a >= e``: p is better
    on k by at least the noise.

    ``p`` is *within the noise* of ``q`` (q != p) when p has no decisive advantage over q on
    any objective: q costs no more (on deterministic costs any advantage is decisive, so the
    costs do not decide it) and p is not more accurate by the noise. Then another training of
    each may well show q dominating p, so p's place on the front is not established. A point
    that q dominates outright is within q's noise too; two identical points are within each
    other's. A point returns the first such ``q`` (by index), ``None`` when it stands out
    from every other point: that point survives the noise.
    """
    n = len(means)
    if len(stds) != n:
        raise ValueError(f"One std per mean is needed, but got {n} means and {len(stds)} stds.")
    signs = []
    for d in directions:
        if d not in ("maximize", "minimize"):
            raise ValueError(f"A direction is 'maximize' or 'minimize', but got {d!r}.")
        signs.append(1.0 if d == "maximize" else -1.0)
    for row in (*means, *stds):
        if len(row) != len(signs):
            raise ValueError(f"Every point needs {len(signs)} values, but got {len(row)}.")

    def decisive(p: int, q: int, k: int) -> bool:
        a = signs[k] * (means[p][k] - means[q][k])
        return a > 0 and a >= math.hypot(stds[p][k], stds[q][k])

    return [next((q for q in range(n)
                  if q != p and not any(decisive(p, q, k) for k in range(len(signs)))), None)
            for p in range(n)]


@dataclass(frozen=True)
class NoisyPoint:
    """A front point's seeded accuracy (``spread``) and the source trial it does not stand out
    from (``neighbour``, ``None`` when it survives the noise)."""

    spread: SeedSpread
    neighbour: int | None

    @property
    def within_noise(self) -> bool:
        return self.neighbour is not None


def noisy_front(attrs: StudyAttrs,
                store: StudyStore) -> tuple[str | None, dict[int, NoisyPoint]]:
    """The latest seeded promotion of the study ``attrs`` describes (one that trained some
    trial with at least 2 seeds) and, by source trial, each promoted trial's :class:`NoisyPoint`:
    :func:`within_noise` over every seeded trial of that promotion (its front and its
    dominated trials alike), on the promoted means and spreads and the promoted study's
    directions (a trial with one seed has no spread and is no point of the test).
    ``(None, {})`` when the study has none.
    """
    for name in reversed(attrs.promotions):
        try:
            promoted, directions, trials = store.completed(name)
        except UnknownStudyError:
            continue  # a deleted promotion
        names = list(promoted.objectives)
        points = noisy_points(spread_of(trials, names, name).values(), names, directions)
        if points:  # else no accuracy, or no trial trained twice
            return name, points
    return None, {}


def noisy_points(spread: Iterable[SeedSpread], objective_names: Sequence[str],
                 directions: Sequence[str]) -> dict[int, NoisyPoint]:
    """:func:`within_noise` over the seeded trials of ``spread`` (those with 2 seeds or more:
    a trial with one has no spread and is no point of the test), on their means of every
    objective and their accuracy's seed std (the costs' is 0): each one's :class:`NoisyPoint`,
    by source trial."""
    seeded = [s for s in spread if s.std is not None]
    if not seeded:
        return {}
    names = list(objective_names)
    accuracy = names.index("accuracy")
    stds = [[(s.std or 0.0) if k == accuracy else 0.0 for k in range(len(names))]
            for s in seeded]
    marks = within_noise([list(s.means) for s in seeded], stds, directions)
    return {s.source_trial: NoisyPoint(s, None if m is None else seeded[m].source_trial)
            for s, m in zip(seeded, marks, strict=True)}
