"""The closed-form expected hypervolume gain: the tiling's volume is the front's hypervolume,
a known metric gains exactly what adding the point adds, and a Gaussian metric gains what
averaging over its draws gains."""

from __future__ import annotations

import numpy as np
import pytest

from studies._ehvi import expected_gains, open_boxes, tile
from studies.pareto import hypervolume


def _front(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    return rng.uniform(0.0, 1.1, (n, d))  # some rows beyond the reference: they cover nothing


@pytest.mark.parametrize("d", [1, 2, 3, 4])
def test_the_open_boxes_are_disjoint_and_fill_what_the_front_leaves(d: int) -> None:
    rng = np.random.default_rng(d)
    for n in (0, 1, 7):
        points = _front(rng, n, d)
        low, high = open_boxes(points)
        assert np.all(high >= low)
        volume = np.prod(high - low, axis=1).sum()
        assert volume == pytest.approx(1.0 - hypervolume(points, np.ones(d)), abs=1e-12)
        # no box reaches into the region a point covers, and the boxes do not overlap
        probes = rng.uniform(0, 1, (400, d))
        inside = np.all((probes[:, None, :] >= low) & (probes[:, None, :] < high), axis=2)
        assert inside.sum(axis=1).max() <= 1
        covered = np.array([np.any(np.all(p >= np.clip(points, 0, 1), axis=1))
                            for p in probes]) if n else np.zeros(len(probes), dtype=bool)
        assert not np.any(covered & inside.any(axis=1))


@pytest.mark.parametrize("d", [1, 2, 3, 4])
def test_a_known_metric_gains_exactly_what_adding_the_point_adds(d: int) -> None:
    rng = np.random.default_rng(10 + d)
    ones = np.ones(d)
    for _ in range(10):
        front = _front(rng, int(rng.integers(0, 10)), d)
        metric = int(rng.integers(d))
        tiling = tile(front, metric)
        assert tiling.hypervolume == pytest.approx(hypervolume(front, ones), abs=1e-12)
        points = rng.uniform(0.0, 1.1, (6, d))
        gains = expected_gains(tiling, np.delete(points, metric, axis=1), points[:, metric],
                               np.zeros(6))
        exact = [hypervolume(np.vstack([front, p[None]]), ones) - hypervolume(front, ones)
                 for p in points]
        assert gains == pytest.approx(exact, abs=1e-12)


def test_a_metric_better_than_the_ideal_counts_as_ideal() -> None:
    tiling = tile(np.array([[0.5, 0.5]]), 0)
    at_ideal, beyond = expected_gains(tiling, np.array([[0.2], [0.2]]), np.array([0.0, -3.0]),
                                      np.zeros(2))
    assert beyond == pytest.approx(at_ideal) and at_ideal == pytest.approx(1 * 0.8 - 0.5 * 0.5)


def test_a_gaussian_metric_gains_the_mean_over_its_draws() -> None:
    rng = np.random.default_rng(0)
    ones = np.ones(3)
    front = rng.uniform(0.0, 1.0, (12, 3))
    tiling = tile(front, 1)
    points = rng.uniform(0.0, 1.0, (4, 3))
    sd = np.array([0.02, 0.1, 0.3, 0.6])
    gains = expected_gains(tiling, np.delete(points, 1, axis=1), points[:, 1], sd)
    base = hypervolume(front, ones)
    for i in range(4):
        draws = points[i][None, :].repeat(3000, axis=0)
        draws[:, 1] = np.maximum(points[i, 1] + sd[i] * rng.standard_normal(3000), 0.0)
        mean = np.mean([hypervolume(np.vstack([front, p[None]]), ones) - base for p in draws])
        assert gains[i] == pytest.approx(mean, abs=0.004)
    # more doubt about a point above the front raises its expected gain
    assert np.all(np.diff(expected_gains(tiling, np.tile(np.delete(points[:1], 1, axis=1),
                                                          (3, 1)),
                                         np.full(3, 0.95), np.array([0.01, 0.1, 0.3]))) > 0)
