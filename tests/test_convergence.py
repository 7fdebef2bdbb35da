"""The convergence rule: the hypervolume's noise from its front points' metric noise, and a
study converged once its best expected gains over a window add up to less than that noise."""

from __future__ import annotations

import math

import numpy as np
import pytest

from studies.convergence import binomial_sd, convergence, hypervolume_noise
from studies.pareto import normalized_hypervolume

DIRECTIONS = ["maximize", "minimize", "minimize"]
REFERENCE = [0.0, 10.0, 10.0]


def test_binomial_noise_is_the_rungs_rule() -> None:
    assert binomial_sd([0.5, 0.0, 1.2], 100) == pytest.approx([0.05, 0.0, 0.0])
    with pytest.raises(ValueError, match="samples >= 1"):
        binomial_sd([0.5], 0)


def test_one_point_moves_the_hypervolume_by_its_cost_area_times_its_noise() -> None:
    # accuracy 0.6, params 2 of 10, MAdds 5 of 10: cost area (1 - 0.2) * (1 - 0.5) = 0.4
    noise = hypervolume_noise([[0.6, 2.0, 5.0]], DIRECTIONS, REFERENCE, 0, 0.03)
    assert noise == pytest.approx(0.4 * 0.03)
    # a dominated trial adds no noise; a point at the reference none either
    assert hypervolume_noise([[0.6, 2.0, 5.0], [0.5, 3.0, 6.0], [0.9, 10.0, 1.0]],
                             DIRECTIONS, REFERENCE, 0, 0.03) == pytest.approx(0.4 * 0.03)
    assert hypervolume_noise([], DIRECTIONS, REFERENCE, 0, 0.03) == 0.0


def test_the_noise_matches_the_spread_of_the_hypervolume_under_noisy_accuracies() -> None:
    rng = np.random.default_rng(1)
    values = np.column_stack([rng.uniform(0.3, 0.9, 30), rng.uniform(0, 10, 30),
                              rng.uniform(0, 10, 30)])
    predicted = hypervolume_noise(values, DIRECTIONS, REFERENCE, 0, 0.01)
    draws = []
    for _ in range(1500):
        noisy = values.copy()
        noisy[:, 0] += 0.01 * rng.standard_normal(len(values))
        draws.append(normalized_hypervolume(noisy, DIRECTIONS, REFERENCE))
    assert predicted == pytest.approx(float(np.std(draws)), rel=0.25)


def test_it_converges_where_a_window_of_gains_first_adds_up_to_less_than_the_noise() -> None:
    gains = [0.1, 0.05, 0.01, 0.004, 0.003, 0.002, 0.002, 0.001]
    c = convergence(gains, 0.01, patience=3)
    assert c.converged and c.at == 5 and c.gain == pytest.approx(0.009)
    assert c.noise == 0.01 and c.patience == 3
    never = convergence(gains, 0.001, patience=3)
    assert not never.converged and never.at is None
    assert never.gain == pytest.approx(0.005)  # the last window's


def test_a_trial_without_a_gain_breaks_the_window_and_noise_can_vary() -> None:
    gains: list[float | None] = [0.001, None, 0.001, 0.001, math.nan, 0.001, 0.001]
    assert not convergence(gains, 1.0, patience=3).converged
    assert convergence([*gains[:4], 0.001], 1.0, patience=3).at == 4
    assert convergence([0.004] * 4, [0.001, 0.001, 0.02, 0.02], patience=2).at == 2
    with pytest.raises(ValueError, match="One noise per gain"):
        convergence([0.1, 0.2], [0.1], patience=1)
    with pytest.raises(ValueError, match="patience >= 1"):
        convergence([0.1], 0.1, patience=0)
