"""The Gaussian process ``studies.costaware`` predicts a candidate's metric with: a
squared-exponential kernel on standardised targets, its length scale and noise picked from a
small grid by the marginal likelihood (or given: the sampler refits them on a schedule)."""

from __future__ import annotations

import math

import numpy as np
from scipy.linalg import cho_solve, solve_triangular

__all__ = ["MIN_SPREAD", "GaussianProcess"]

#: The smallest spread of the metric the model assumes (its units: 5 points of accuracy), so
#: that a few trials that scored alike do not make it sure of every other architecture.
MIN_SPREAD = 0.05

_SCALES = (0.25, 0.5, 1.0, 2.0)  # length scales, in units of sqrt(dimensions) / 2
_NOISES = (1e-3, 1e-2, 1e-1, 0.3)  # noise variances of the standardised targets


class GaussianProcess:
    """A Gaussian process fitted to rows ``x`` (inputs in [0, 1]) and targets ``y``.

    ``hyper`` (length scale, noise) skips the grid search; :attr:`hyper` holds what was used,
    to pass to the next fit.
    """

    def __init__(self, x: np.ndarray, y: np.ndarray, *,
                 hyper: tuple[float, float] | None = None) -> None:
        self.mean, self.std = float(y.mean()), max(float(y.std()), MIN_SPREAD)
        z = (y - self.mean) / self.std
        self.x = x
        dim = max(1, x.shape[1])
        grid = ([hyper] if hyper is not None else
                [(s * math.sqrt(dim) / 2, noise) for s in _SCALES for noise in _NOISES])
        distances = _squared_distances(x, x)
        best = -math.inf
        for length, noise in grid:
            k = np.exp(-0.5 * distances / length**2) + noise * np.eye(len(x))
            try:
                chol = np.linalg.cholesky(k)
            except np.linalg.LinAlgError:
                continue
            alpha = cho_solve((chol, True), z)
            fit = -0.5 * z @ alpha - np.log(np.diag(chol)).sum()
            if fit > best:
                best, self.hyper, self.chol, self.alpha = fit, (length, noise), chol, alpha
        if best == -math.inf:  # every kernel singular: the most regular of the grid
            length, noise = _SCALES[-1] * math.sqrt(dim) / 2, _NOISES[-1]
            k = np.exp(-0.5 * distances / length**2) + noise * np.eye(len(x))
            self.hyper, self.chol = (length, noise), np.linalg.cholesky(k)
            self.alpha = cho_solve((self.chol, True), z)

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The predicted mean and standard deviation of the target at each row of ``x``."""
        ks = np.exp(-0.5 * _squared_distances(x, self.x) / self.hyper[0] ** 2)
        mu = ks @ self.alpha
        v = solve_triangular(self.chol, ks.T, lower=True)
        var = np.clip(1.0 - (v**2).sum(0), 1e-9, None)
        return self.mean + self.std * mu, self.std * np.sqrt(var)


def _squared_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = (a**2).sum(1)[:, None] + (b**2).sum(1)[None, :] - 2.0 * a @ b.T
    return np.asarray(np.clip(out, 0.0, None))
