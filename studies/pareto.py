"""Pareto fronts and hypervolume, as pure functions of objective vectors (tested by equality).

Every hypervolume the project prints (the progress line, ``nas status``, the dashboard) is taken
against a FIXED reference point, so that values compare across time and across studies. Each
objective is scaled so that its reference maps to 0 and its ideal to 1 (accuracy 1, params,
MAdds and latency 0):

    g = (value - reference) / (ideal - reference), clipped to [0, 1]

and the hypervolume is the volume of the union of the boxes ``[0, g]`` in the unit cube: a value
in [0, 1], 1 only for an ideal trial, 0 for one no better than the reference in some objective.
A single trial's hypervolume is the product of its ``g``. The reference is the study's
``nas.reference`` (``studies.store.StudyKey.REFERENCE``, raw units, one entry per objective),
stored when the study is created (``studies.reference.study_reference``): the task's chance level
for accuracy, ``params_max`` / ``madds_max`` / ``latency_ms_max`` where constrained, else the
space's largest model (latency: the largest observed, times 1.1). An entry that is missing, or
a study without a stored reference (created before references were stored), is derived from the
trials themselves by :func:`fill_reference`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np

#: Objective vectors, one row per trial.
Values: TypeAlias = "Sequence[Sequence[float]] | np.ndarray"

__all__ = [
    "REFERENCE_MARGIN",
    "Reference",
    "Sweep",
    "fill_reference",
    "hypervolume",
    "hypervolume_history",
    "ideal_point",
    "nondominated_mask",
    "nondominated_ranks",
    "normalized_hypervolume",
    "pareto_sweep",
    "running_front",
    "scale_to_reference",
    "to_minimization",
]

#: A reference point in raw objective units; ``None`` entries are derived from the trials.
Reference: TypeAlias = "Sequence[float | None] | np.ndarray"

#: A reference derived from the trials sits this factor beyond the largest observed value.
REFERENCE_MARGIN = 1.1


def to_minimization(values: Values, directions: Sequence[str]) -> np.ndarray:
    """Values as an (n, m) array where every objective is minimised (maximised ones negated)."""
    arr = np.asarray(values, dtype=float).reshape(len(values), len(directions))
    signs = np.array([-1.0 if d == "maximize" else 1.0 for d in directions])
    return arr * signs


def _dominated_by(front: np.ndarray, point: np.ndarray) -> bool:
    return bool(np.any(np.all(front <= point, axis=1) & np.any(front < point, axis=1)))


def _dominated_rows(front: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """For each of ``rows``, whether a row of ``front`` dominates it (vectorised)."""
    front, rows = front[None, :, :], rows[:, None, :]
    return np.any(np.all(front <= rows, axis=2) & np.any(front < rows, axis=2), axis=1)


def _chunk(front_size: int) -> int:
    # Small enough that the front improves between chunks, and that a chunk's comparison
    # array (chunk x front x objectives) stays small.
    return max(16, min(256, 100_000 // max(1, front_size)))


def nondominated_mask(points: np.ndarray) -> np.ndarray:
    """True where no other row is at least as good everywhere and better somewhere
    (minimisation). Duplicates of a front point are all on the front.

    Rows are visited in lexicographic order, where every dominator of a row comes before it, so
    each row is compared with the front found so far only, a chunk of rows at a time:
    O(n * front) instead of O(n^2).
    """
    points = np.asarray(points, dtype=float)
    mask = np.zeros(len(points), dtype=bool)
    if len(points) == 0:
        return mask
    order = np.lexsort(points.T[::-1])
    front: list[int] = []
    start = 0
    while start < len(order):
        rows = order[start:start + _chunk(len(front))]
        start += len(rows)
        if front:
            rows = rows[~_dominated_rows(points[front], points[rows])]
        for i in rows:  # few are left; one may still dominate a later one of the chunk
            if not (front and _dominated_by(points[front], points[i])):
                front.append(int(i))
    mask[front] = True
    return mask


def running_front(points: np.ndarray, front: list[int], row: int) -> tuple[list[int], bool]:
    """Add ``points[row]`` to ``front`` (indices of a non-dominated set): the new front and
    whether it changed. Rows it dominates leave; a dominated row leaves the front as it was."""
    current = points[front]
    if front and _dominated_by(current, points[row]):
        return front, False
    if front:
        beaten = np.all(points[row] <= current, axis=1) & np.any(points[row] < current, axis=1)
        front = [j for j, out in zip(front, beaten, strict=True) if not out]
    return [*front, row], True


def nondominated_ranks(points: np.ndarray) -> np.ndarray:
    """Rank of each point by non-dominated sorting (0 = the Pareto front)."""
    ranks = np.full(len(points), -1)
    remaining = np.arange(len(points))
    rank = 0
    while remaining.size:
        front = nondominated_mask(points[remaining])
        ranks[remaining[front]] = rank
        remaining = remaining[~front]
        rank += 1
    return ranks


def _hv(points: np.ndarray, ref: np.ndarray) -> float:
    if len(points) == 0:
        return 0.0
    if points.shape[1] == 1:
        return float(ref[0] - points[:, 0].min())
    if points.shape[1] == 2:
        order = np.argsort(points[:, 0], kind="stable")
        volume, best_y = 0.0, ref[1]
        for i, j in enumerate(order):
            x_next = points[order[i + 1], 0] if i + 1 < len(order) else ref[0]
            best_y = min(best_y, points[j, 1])
            volume += (x_next - points[j, 0]) * (ref[1] - best_y)
        return float(volume)
    # slice along the last objective: the volume between consecutive levels is the
    # (m-1)-dimensional hypervolume of the points at or below that level.
    order = np.argsort(points[:, -1], kind="stable")
    volume = 0.0
    for i in range(len(order)):
        z_next = points[order[i + 1], -1] if i + 1 < len(order) else ref[-1]
        if z_next > points[order[i], -1]:
            volume += (z_next - points[order[i], -1]) * _hv(points[order[: i + 1], :-1], ref[:-1])
    return float(volume)


def hypervolume(points: np.ndarray, ref: np.ndarray) -> float:
    """Volume dominated by ``points`` (minimisation) and bounded by ``ref``."""
    points = np.asarray(points, dtype=float)
    ref = np.asarray(ref, dtype=float)
    if len(points) == 0:
        return 0.0
    inside = points[np.all(points < ref, axis=1)]
    if len(inside) == 0:
        return 0.0
    return _hv(inside[nondominated_mask(inside)], ref)


def ideal_point(directions: Sequence[str]) -> np.ndarray:
    """The best value of each objective: 1 for a maximised one (accuracy), 0 for a minimised one
    (params, MAdds, latency)."""
    return np.array([1.0 if d == "maximize" else 0.0 for d in directions])


def fill_reference(reference: Reference | None, values: Values,
                   directions: Sequence[str]) -> np.ndarray:
    """The reference point with every missing entry (``reference`` None, or an entry None or
    NaN) derived from ``values``: a minimised objective :data:`REFERENCE_MARGIN` times its
    largest observed value (1 where none is positive), a maximised one 0."""
    m = len(directions)
    given = [None] * m if reference is None else list(reference)
    if len(given) != m:
        raise ValueError(f"The reference point must have one entry per objective ({m}), but "
                         f"got {len(given)}: {given!r}.")
    observed = np.asarray(values, dtype=float).reshape(-1, m) if len(values) else np.zeros((0, m))
    out = np.empty(m)
    for k, (entry, direction) in enumerate(zip(given, directions, strict=True)):
        if entry is not None and np.isfinite(float(entry)):
            out[k] = float(entry)
        elif direction == "maximize":
            out[k] = 0.0
        else:
            largest = float(observed[:, k].max()) if len(observed) else 0.0
            out[k] = REFERENCE_MARGIN * largest if largest > 0 else 1.0
    return out


def scale_to_reference(values: Values, directions: Sequence[str],
                       reference: Reference | None = None) -> np.ndarray:
    """``values`` as points to minimise in the unit cube: ``1 - g`` per objective (the ideal at
    0, the reference at 1, see the module's docstring), so :func:`hypervolume` against a
    reference of ones is the normalised hypervolume. Values better than the ideal count as
    ideal; an objective whose reference equals its ideal scores every trial as ideal."""
    m = len(directions)
    if not len(values):
        return np.zeros((0, m))
    raw = np.asarray(values, dtype=float).reshape(len(values), m)
    ref = fill_reference(reference, raw, directions)
    ideal = ideal_point(directions)
    span = ideal - ref  # positive for a maximised objective, negative for a minimised one
    safe = np.where(span != 0, span, 1.0)
    goodness = np.where(span != 0, (raw - ref) / safe, 1.0)
    return 1.0 - np.minimum(goodness, 1.0)


def normalized_hypervolume(values: Values, directions: Sequence[str],
                           reference: Reference | None = None) -> float:
    """The hypervolume of ``values`` against the fixed ``reference`` (raw units; the study's
    ``nas.reference``), in [0, 1]: the last point of :func:`hypervolume_history`, computed once."""
    if not len(values):
        return 0.0
    return hypervolume(scale_to_reference(values, directions, reference),
                       np.ones(len(directions)))


def hypervolume_history(values: Values, directions: Sequence[str],
                        reference: Reference | None = None) -> list[float]:
    """The hypervolume after each trial, against the fixed ``reference`` (as
    :func:`normalized_hypervolume`; ``None`` entries derived from all ``values``)."""
    if not len(values):
        return []
    points = scale_to_reference(values, directions, reference)
    ones = np.ones(len(directions))
    return [hypervolume(points[: i + 1], ones) for i in range(len(points))]


@dataclass(frozen=True)
class Sweep:
    """The trials in order: hypervolume after rows ``positions`` and the final front."""

    positions: list[int]
    volumes: list[float]
    front: np.ndarray  # mask over the rows

    @property
    def hypervolume(self) -> float:
        return self.volumes[-1] if self.volumes else 0.0


def pareto_sweep(values: Values, directions: Sequence[str], *,
                 reference: Reference | None = None, max_points: int | None = None) -> Sweep:
    """Walk ``values``' rows in order keeping the running front; the hypervolume after each row
    (as :func:`hypervolume_history` against ``reference``) and the final front (as
    :func:`nondominated_mask`), in one pass.

    The volume is recomputed only where the front changed. With ``max_points`` it is reported
    at that many evenly spaced rows (always the last) for a long study's plot; each value is
    still exact.
    """
    n = len(values)
    if n == 0:
        return Sweep([], [], np.zeros(0, dtype=bool))
    # The front over the values themselves (scaling clips values better than the ideal, which
    # would tie them); the volume over their scaled image (scaling keeps dominance, so the
    # scaled front bounds the same volume as all the scaled rows).
    points = to_minimization(values, directions)
    scaled, ref = scale_to_reference(values, directions, reference), np.ones(len(directions))
    if max_points is None or n <= max_points:
        wanted = np.ones(n, dtype=bool)
    else:
        wanted = np.zeros(n, dtype=bool)
        wanted[np.unique(np.linspace(0, n - 1, max_points).round().astype(int))] = True
    front: list[int] = []
    positions: list[int] = []
    volumes: list[float] = []
    volume, changed, start = 0.0, False, 0
    while start < n:
        rows = np.arange(start, min(n, start + _chunk(len(front))))
        start += len(rows)
        # Dominated by the front as it stood before the chunk: dominated for good (whatever
        # replaced a front row later dominates that row too).
        skip = (_dominated_rows(points[front], points[rows]) if front
                else np.zeros(len(rows), dtype=bool))
        for i, dominated in zip(rows, skip, strict=True):
            if not dominated:
                front, added = running_front(points, front, int(i))
                changed = changed or added
            if wanted[i]:
                if changed:
                    volume, changed = hypervolume(scaled[front], ref), False
                positions.append(int(i))
                volumes.append(volume)
    mask = np.zeros(n, dtype=bool)
    mask[front] = True
    return Sweep(positions, volumes, mask)
