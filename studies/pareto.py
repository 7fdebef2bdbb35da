"""Pareto fronts and hypervolume, as pure functions of objective vectors (tested by equality)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np

#: Objective vectors, one row per trial.
Values: TypeAlias = "Sequence[Sequence[float]] | np.ndarray"

__all__ = [
    "Sweep",
    "hypervolume",
    "hypervolume_history",
    "nondominated_mask",
    "nondominated_ranks",
    "normalise",
    "normalized_hypervolume",
    "pareto_sweep",
    "running_front",
    "to_minimization",
]


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


def normalise(values: Values, directions: Sequence[str]) -> tuple[
    np.ndarray, np.ndarray
]:
    """``values`` for minimisation with each objective scaled to [0, 1] over all of them, and
    the reference point (1.1 everywhere): the scale of every hypervolume this project reports."""
    points = to_minimization(values, directions)
    low, high = points.min(axis=0), points.max(axis=0)
    span = np.where(high > low, high - low, 1.0)
    return (points - low) / span, np.full(points.shape[1], 1.1)


def normalized_hypervolume(values: Sequence[Sequence[float]], directions: Sequence[str]) -> float:
    """The last point of :func:`hypervolume_history` (of all ``values``), computed once."""
    if not len(values):
        return 0.0
    points, ref = normalise(values, directions)
    return hypervolume(points, ref)


def hypervolume_history(values: Sequence[Sequence[float]], directions: Sequence[str]) -> list[
    float
]:
    """Hypervolume after each trial, every objective scaled to [0, 1] over all ``values`` and
    the reference point at 1.1 (so the curve is comparable along the whole study)."""
    if not len(values):
        return []
    points, ref = normalise(values, directions)
    return [hypervolume(points[: i + 1], ref) for i in range(len(points))]


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
                 max_points: int | None = None) -> Sweep:
    """Walk ``values``' rows in order keeping the running front; the hypervolume after each row
    (as :func:`hypervolume_history`) and the final front (as :func:`nondominated_mask`), in one
    pass.

    The volume is recomputed only where the front changed. With ``max_points`` it is reported
    at that many evenly spaced rows (always the last) for a long study's plot; each value is
    still exact.
    """
    n = len(values)
    if n == 0:
        return Sweep([], [], np.zeros(0, dtype=bool))
    points, ref = normalise(values, directions)
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
                    volume, changed = hypervolume(points[front], ref), False
                positions.append(int(i))
                volumes.append(volume)
    mask = np.zeros(n, dtype=bool)
    mask[front] = True
    return Sweep(positions, volumes, mask)
