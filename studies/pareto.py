"""Pareto fronts and hypervolume, as pure functions of objective vectors (tested by equality)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = [
    "hypervolume",
    "hypervolume_history",
    "nondominated_mask",
    "nondominated_ranks",
    "normalized_hypervolume",
    "to_minimization",
]


def to_minimization(values: Sequence[Sequence[float]], directions: Sequence[str]) -> np.ndarray:
    """Values as an (n, m) array where every objective is minimised (maximised ones negated)."""
    arr = np.asarray(values, dtype=float).reshape(len(values), len(directions))
    signs = np.array([-1.0 if d == "maximize" else 1.0 for d in directions])
    return arr * signs


def nondominated_mask(points: np.ndarray) -> np.ndarray:
    """True where no other point is at least as good everywhere and better somewhere."""
    n = len(points)
    mask = np.ones(n, dtype=bool)
    for i in range(n):
        le = np.all(points <= points[i], axis=1)
        lt = np.any(points < points[i], axis=1)
        if np.any(le & lt):
            mask[i] = False
    return mask


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


def _normalise(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    low, high = points.min(axis=0), points.max(axis=0)
    span = np.where(high > low, high - low, 1.0)
    return (points - low) / span, np.full(points.shape[1], 1.1)


def normalized_hypervolume(values: Sequence[Sequence[float]], directions: Sequence[str]) -> float:
    """The last point of :func:`hypervolume_history` (of all ``values``), computed once."""
    if not len(values):
        return 0.0
    points, ref = _normalise(to_minimization(values, directions))
    return hypervolume(points, ref)


def hypervolume_history(values: Sequence[Sequence[float]], directions: Sequence[str]) -> list[
    float
]:
    """Hypervolume after each trial, every objective scaled to [0, 1] over all ``values`` and
    the reference point at 1.1 (so the curve is comparable along the whole study)."""
    if not len(values):
        return []
    points, ref = _normalise(to_minimization(values, directions))
    return [hypervolume(points[: i + 1], ref) for i in range(len(points))]
