"""When a multi-objective study has converged: the default sampler's expected gain against the
hypervolume's own noise (pure functions; Optuna's Terminator is single-objective only).

Before each trial ``costaware`` records the expected hypervolume gain of the candidate it chose,
the best it could find (``studies.costaware.GAIN_KEY``). The hypervolume itself is uncertain:
each front point's metric is measured with noise (a share of validation samples: binomial,
``sqrt(p (1 - p) / samples)``, the rungs' rule in ``studies.asha``; or the seed-to-seed spread
of a seeded promotion, ``studies.noise``), and to first order the hypervolume moves with each
point's metric by the area of cost space that point alone covers at its metric level
(:func:`hypervolume_noise`). Once the best expected gains of the last ``patience`` trials add up
to less than a share of that noise, as many trials again are expected to add less than the
figure can resolve: the study has converged (:func:`convergence`).

The defaults (:data:`DEFAULT_PATIENCE` 50 trials, :data:`NOISE_FRACTION` a quarter of the
noise) are calibrated on NAS-Bench-Graph's 8 datasets (``benchmarks/convergence.py``, the
accuracy noise taken from the table's validation-test spread, an upper estimate): there the rule
gave up at most 1.6% of the hypervolume a 500-trial run reaches (median at most 1.0% per
dataset), where patience 10 at the whole noise gave up 5-13% on PubMed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from studies._ehvi import open_boxes
from studies.pareto import (
    Reference,
    Values,
    fill_reference,
    ideal_point,
    nondominated_mask,
    scale_to_reference,
    to_minimization,
)
from studies.store.keys import SamplerKey

__all__ = ["DEFAULT_PATIENCE", "NOISE_FRACTION", "Convergence", "binomial_sd", "convergence",
           "convergence_report", "convergence_text", "hypervolume_noise",
           "recorded_convergence"]

#: Trials in a row whose best expected gains must add up to less than the noise's share.
DEFAULT_PATIENCE = 50
#: The share of the hypervolume's noise the window of gains must stay below.
NOISE_FRACTION = 0.25


def binomial_sd(metric: Sequence[float] | np.ndarray, samples: int) -> np.ndarray:
    """The standard deviation of a share measured on ``samples`` validation samples (the
    rungs' rule): ``sqrt(p (1 - p) / samples)``, ``p`` clipped to [0, 1]."""
    if samples < 1:
        raise ValueError(f"`samples >= 1` must hold, but got {samples=}.")
    p = np.clip(np.asarray(metric, dtype=float), 0.0, 1.0)
    return np.asarray(np.sqrt(p * (1 - p) / samples))


def hypervolume_noise(values: Values, directions: Sequence[str], reference: Reference | None,
                      metric: int, metric_sd: float | Sequence[float] | np.ndarray) -> float:
    """The standard deviation of the normalised hypervolume of ``values`` (raw objective
    vectors, one row per trial trained to the full epochs) that comes from the noise of each
    trial's metric (``metric_sd``: one for all, or one per row; raw units), to first order: the
    square root of the sum over the front of (the cost area the point alone covers at its
    metric level, times its scaled metric's standard deviation) squared. The costs are exact."""
    raw = np.asarray(values, dtype=float).reshape(len(values), len(directions))
    if len(raw) == 0:
        return 0.0
    sds = np.broadcast_to(np.asarray(metric_sd, dtype=float), (len(raw),))
    ref = fill_reference(reference, raw, directions)
    span = abs(ideal_point(directions)[metric] - ref[metric]) or 1.0
    front = nondominated_mask(to_minimization(raw, directions))
    scaled = np.clip(scale_to_reference(raw, directions, ref)[front], 0.0, 1.0)
    sds = sds[front] / span
    ys, costs = scaled[:, metric], np.delete(scaled, metric, axis=1)
    total = 0.0
    for i in range(len(scaled)):
        if ys[i] >= 1.0 or np.any(costs[i] >= 1.0):
            continue  # at or beyond the reference: it covers nothing
        others = np.ones(len(scaled), dtype=bool)
        others[i] = False
        below = costs[others & (ys <= ys[i])]
        if costs.shape[1] == 0:
            area = 0.0 if len(below) else 1.0
        else:
            low, high = open_boxes(below)
            area = float(np.clip(high - np.maximum(low, costs[i]), 0.0, None).prod(axis=1).sum())
        total += (area * sds[i]) ** 2
    return math.sqrt(total)


@dataclass(frozen=True)
class Convergence:
    """Whether the gains converged: ``at`` the position (0-based, in the order given) of the
    first trial whose window of the last ``patience`` gains added up to less than the noise,
    or None; ``noise`` the threshold there (or at the last position), ``gain`` that window's
    sum (or the last window's; infinite where it holds a trial without a gain)."""

    converged: bool
    at: int | None
    noise: float
    gain: float
    patience: int


def convergence(gains: Sequence[float | None], noise: float | Sequence[float], *,
                patience: int = DEFAULT_PATIENCE) -> Convergence:
    """The first position where the last ``patience`` expected gains (one per trial, in the
    order asked; None: a trial the sampler did not choose, such as an enqueued one or a random
    start-up draw) add up to less than ``noise`` (one threshold, or one per position: the
    hypervolume's noise when that trial was asked). A window with a None or non-finite gain
    never converges."""
    if patience < 1:
        raise ValueError(f"`patience >= 1` must hold, but got {patience=}.")
    thresholds = ([float(noise)] * len(gains) if isinstance(noise, (int, float))
                  else [float(v) for v in noise])
    if len(thresholds) != len(gains):
        raise ValueError(f"One noise per gain is needed, but got {len(thresholds)} for "
                         f"{len(gains)} gains.")
    window = math.inf
    for i in range(patience - 1, len(gains)):
        last = gains[i - patience + 1: i + 1]
        window = (math.fsum(g for g in last if g is not None)
                  if all(g is not None and math.isfinite(g) for g in last) else math.inf)
        if window < thresholds[i]:
            return Convergence(True, i, thresholds[i], window, patience)
    return Convergence(False, None, thresholds[-1] if thresholds else 0.0, window, patience)


def recorded_convergence(attrs: Sequence[Mapping[str, Any]], *,
                         patience: int = DEFAULT_PATIENCE,
                         fraction: float = NOISE_FRACTION) -> Convergence | None:
    """:func:`convergence` of a study from its trials' system attributes, in the order the
    trials were asked (their numbers): the gain (``SamplerKey.GAIN``) and ``fraction`` of the
    noise (``SamplerKey.NOISE``) the default sampler recorded with each choice (the result's
    ``noise`` is that share). These are values read
    from the database: one that is not a finite number at least 0 counts as not recorded (a
    gain: that window never converges; a noise: 0 there, nothing is below it). None where no
    trial holds a gain (the study's sampler records none)."""
    gains = [_recorded(a.get(SamplerKey.GAIN)) for a in attrs]
    if all(g is None for g in gains):
        return None
    noise = [fraction * (_recorded(a.get(SamplerKey.NOISE)) or 0.0) for a in attrs]
    return convergence(gains, noise, patience=patience)


def convergence_report(numbers: Sequence[int], attrs: Sequence[Mapping[str, Any]], *,
                       stops: bool) -> dict[str, Any] | None:
    """What ``nas status --json`` and the dashboard say of a study's convergence, from its
    trials' ``numbers`` and system ``attrs`` in that order (:func:`recorded_convergence`):
    ``converged``, ``at`` (the trial it converged at, or None), ``gain`` (that window's sum of
    gains, or the last window's; None where it holds a trial without one), ``noise`` (the
    hypervolume's there), ``fraction`` (the share of it the gains must stay below),
    ``patience``, ``stops`` (whether the study stops there: ``budget.until: converged``) and
    ``trials`` (how many were read). None where no trial records a gain (another sampler)."""
    found = recorded_convergence(attrs)
    if found is None:
        return None
    return {"converged": found.converged,
            "at": int(numbers[found.at]) if found.at is not None else None,
            "gain": found.gain if math.isfinite(found.gain) else None,
            "noise": found.noise / NOISE_FRACTION, "fraction": NOISE_FRACTION,
            "patience": found.patience, "stops": stops, "trials": len(attrs)}


def _recorded(value: Any) -> float | None:
    """A stored gain or noise: a finite number at least 0, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def convergence_text(report: Mapping[str, Any]) -> str:
    """One line for ``nas status`` and the dashboard from ``report`` (:func:`convergence_report`:
    ``converged``, ``at``, ``gain``, ``noise``, ``fraction``, ``patience``, ``stops``)."""
    gain, noise, patience = report["gain"], report["noise"], report["patience"]
    window = (f"the expected hypervolume gains of {patience} trials in a row add up to "
              f"{gain:.2g}" if gain is not None else None)
    share = f"{report['fraction']:g} x the hypervolume's noise {noise:.2g}"
    if report["converged"]:
        after = ("the study stopped there (budget.until: converged)" if report["stops"] else
                 "more trials are expected to add less than it can resolve")
        return f"converged at trial {report['at']}: {window}, below {share}; {after}"
    if window is None and report.get("trials", patience) < patience:
        return (f"not converged: {report['trials']} trials so far, and it is judged over "
                f"{patience} in a row")
    if window is None:
        return (f"not converged: the last {patience} trials were not all chosen by the "
                "default sampler")
    if noise <= 0:
        return (f"not converged: {window}; the hypervolume's noise is not known (the task's "
                "validation size is not)")
    return f"not converged: {window} (the last), not below {share}"
