"""The expected hypervolume gain of a point whose costs are known and whose metric is Gaussian,
in closed form (``studies.costaware``'s acquisition).

Points live in the unit cube of :func:`studies.pareto.scale_to_reference`: every objective
minimised, the ideal at 0, the reference at 1. With its costs ``c`` fixed, a candidate's gain
over a front is piecewise linear in its (scaled) metric ``y``: slice the cube along the metric
at the front's metric levels ``L_0 = 0 < L_1 < ... < 1``; in the slab ``[L_j, L_j+1)`` the
candidate adds, per unit of metric, the area ``A_j(c)`` of its cost box ``[c, 1]`` that no
front point with metric at most ``L_j`` covers, so

    gain(y) = sum_j A_j(c) * (L_j+1 - max(y, L_j))+

and under ``y ~ N(mu, sd)`` each term's expectation is ``A_j(c) * (psi(L_j+1) - psi(L_j))``
with ``psi(x) = E[(x - y)+] = (x - mu) Phi(z) + sd phi(z)``, ``z = (x - mu) / sd``: no sampling.
``A_j(c)`` is a sum over the boxes that tile the part of slab ``j``'s cost square no front
point covers (:func:`open_boxes`), each clipped to ``[c, 1]``.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from scipy.special import ndtr

from studies.pareto import nondominated_mask

__all__ = ["Tiling", "expected_gains", "open_boxes", "tile"]

_SQRT_2PI = math.sqrt(2.0 * math.pi)


def open_boxes(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint boxes (lower and upper corners, one row each) whose union is the part of the
    unit cube ``[0, 1]^d`` that no row of ``points`` covers (a row covers ``[row, 1]``,
    minimisation). Rows outside the cube are clipped to it; dominated rows change nothing."""
    points = np.clip(np.asarray(points, dtype=float), 0.0, 1.0)
    d = points.shape[1]
    if len(points) == 0:
        return np.zeros((1, d)), np.ones((1, d))
    if d == 1:
        top = float(points[:, 0].min())
        return (np.zeros((1, 1)), np.full((1, 1), top)) if top > 0 else _none(1)
    if d == 2:
        return _open_boxes_2d(points)
    lows, highs = [], []
    levels = np.unique(np.concatenate([[0.0], points[:, -1], [1.0]]))
    for lo, hi in itertools.pairwise(levels):
        sub_lo, sub_hi = open_boxes(points[points[:, -1] <= lo, :-1])
        lows.append(np.column_stack([sub_lo, np.full(len(sub_lo), lo)]))
        highs.append(np.column_stack([sub_hi, np.full(len(sub_hi), hi)]))
    return np.vstack(lows), np.vstack(highs)


def _none(d: int) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros((0, d)), np.zeros((0, d))


def _open_boxes_2d(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`open_boxes` in two dimensions: the staircase's columns, vectorised."""
    order = np.lexsort((points[:, 1], points[:, 0]))
    x, y = points[order, 0], points[order, 1]
    before = np.minimum.accumulate(np.concatenate([[1.0], y]))[:-1]
    step = y < before  # the staircase: each lower than every point to its left
    x, y = x[step], y[step]
    left = np.concatenate([[0.0], x])
    right = np.concatenate([x, [1.0]])
    height = np.concatenate([[1.0], y])
    keep = (right > left) & (height > 0)
    lo = np.column_stack([left[keep], np.zeros(int(keep.sum()))])
    hi = np.column_stack([right[keep], height[keep]])
    return lo, hi


class Tiling:
    """The part of the unit cube a front leaves open, tiled by slab along the metric column:
    ``levels`` the slab bounds, and per box its slab, and its cost corners (the other columns
    in order). ``hypervolume`` is the front's (one minus the open volume)."""

    def __init__(self, levels: np.ndarray, slab: np.ndarray, low: np.ndarray,
                 high: np.ndarray) -> None:
        self.levels, self.slab, self.low, self.high = levels, slab, low, high
        widths = np.diff(levels)[slab]
        self.hypervolume = float(1.0 - (widths * np.prod(high - low, axis=1)).sum())


def tile(front: np.ndarray, metric: int) -> Tiling:
    """The :class:`Tiling` of ``front`` (scaled points, any rows: dominated ones cover nothing
    more) with the metric in column ``metric``."""
    front = np.clip(np.asarray(front, dtype=float), 0.0, 1.0)
    if len(front):
        front = front[nondominated_mask(front)]
    costs = np.delete(front, metric, axis=1)
    ys = front[:, metric]
    levels = np.unique(np.concatenate([[0.0], ys, [1.0]]))
    slabs, lows, highs = [], [], []
    for j, lo in enumerate(levels[:-1]):
        below = costs[ys <= lo]
        if costs.shape[1] == 0:
            box_lo, box_hi = (_none(0) if len(below) else (np.zeros((1, 0)), np.zeros((1, 0))))
        else:
            box_lo, box_hi = open_boxes(below)
        slabs.append(np.full(len(box_lo), j))
        lows.append(box_lo)
        highs.append(box_hi)
    return Tiling(levels, np.concatenate(slabs).astype(int), np.vstack(lows), np.vstack(highs))


def expected_gains(tiling: Tiling, costs: np.ndarray, mu: np.ndarray,
                   sd: np.ndarray) -> np.ndarray:
    """Each candidate's expected hypervolume gain over the tiled front: its scaled costs (one
    row each, the tiling's cost columns), its scaled metric's mean and standard deviation
    (0: known exactly)."""
    costs = np.asarray(costs, dtype=float).reshape(len(mu), tiling.low.shape[1])
    mu, sd = np.asarray(mu, dtype=float), np.asarray(sd, dtype=float)
    # (candidates, boxes): the part of each open box inside each candidate's cost box
    inside = np.clip(tiling.high[None, :, :] - np.maximum(tiling.low[None, :, :],
                                                          costs[:, None, :]), 0.0, None)
    area = inside.prod(axis=2)
    psi = _psi(tiling.levels[None, :], mu[:, None], sd[:, None])  # (candidates, levels)
    weight = psi[:, 1:] - psi[:, :-1]  # (candidates, slabs)
    return np.asarray((area * weight[:, tiling.slab]).sum(axis=1))


def _psi(x: np.ndarray, mu: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """``E[(x - y)+]`` for ``y ~ N(mu, sd)`` (``sd`` 0: ``(x - mu)+``)."""
    gap = x - mu
    safe = np.where(sd > 0, sd, 1.0)
    z = gap / safe
    smooth = gap * ndtr(z) + safe * np.exp(-0.5 * z * z) / _SQRT_2PI
    return np.where(sd > 0, smooth, np.maximum(gap, 0.0))
