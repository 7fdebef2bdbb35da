"""Multi-objective asynchronous successive halving (ASHA) across trials, as a Ray Tune scheduler.

Rungs sit at ``grace * eta**i`` epochs (below the full budget). When a trial reaches a rung its
objective vector there (the metric at that epoch, plus the cost objectives, which training does
not change) joins the rung's record. It continues when it is non-dominated among the trials at
that rung, or when it is in the best ``1/eta`` of them by non-dominated rank and crowding; a rung
with fewer than ``eta`` trials lets everyone through. The engine's studies compare accuracies
within their noise (``Rungs.samples``, the validation samples they are measured on): a peer
dominates a trial only if its accuracy is higher by more than one standard error of the
difference, at no higher cost, so a difference the validation split cannot resolve stops
nothing. Stopped trials keep the fidelity they reached. ``Rungs`` is the pure bookkeeping
(rebuilt from the per-epoch table on resume); ``MultiObjectiveASHA`` is the Tune
``TrialScheduler`` around it (Tune's own ASHA and HyperBand take one metric).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from studies.pareto import nondominated_ranks, to_minimization
from studies.tune_report import EpochResult, kind_of

__all__ = ["MultiObjectiveASHA", "Rungs", "priority_order"]


def _crowding(points: np.ndarray) -> np.ndarray:
    n, m = points.shape
    distance = np.zeros(n)
    if n <= 2:
        return np.full(n, np.inf)
    for j in range(m):
        order = np.argsort(points[:, j])
        span = points[order[-1], j] - points[order[0], j]
        distance[order[0]] = distance[order[-1]] = np.inf
        if span > 0:
            distance[order[1:-1]] += (points[order[2:], j] - points[order[:-2], j]) / span
    return distance


def priority_order(points: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """The non-dominated rank of each row of ``points`` (minimisation) and the rows best first:
    by rank, then by crowding distance within a rank (wider first)."""
    ranks = nondominated_ranks(points)
    crowd = np.zeros(len(points))
    for r in np.unique(ranks):
        members = np.flatnonzero(ranks == r)
        crowd[members] = _crowding(points[members])
    return ranks, sorted(range(len(points)), key=lambda i: (ranks[i], -crowd[i]))


@dataclass
class Rungs:
    """ASHA rung bookkeeping for one study (pure: no I/O)."""

    grace: int
    eta: int
    max_epochs: int
    directions: Sequence[str]
    records: dict[int, dict[int, tuple[float, ...]]] = field(default_factory=dict)
    #: A rung stops no trial until it holds this many records (at least ``eta``).
    min_peers: int = 0
    #: A trial non-dominated among its rung's records continues whatever its share.
    keep_nondominated: bool = True
    #: The validation samples an accuracy-like metric (a share of samples, in [0, 1]) is
    #: measured on. Where set, a trial counts as dominated at a rung only by a peer whose metric
    #: beats its own by more than ``noise_z`` standard errors of the difference (each value's
    #: binomial ``sqrt(p (1 - p) / samples)``) at no higher cost: a difference the validation
    #: set cannot resolve stops nothing. None compares the values exactly.
    samples: int | None = None
    noise_z: float = 1.0

    @property
    def epochs(self) -> list[int]:
        if self.grace >= self.max_epochs:
            return []
        count = math.floor(math.log(self.max_epochs / self.grace, self.eta) - 1e-9) + 1
        return [self.grace * self.eta**i for i in range(count)
                if self.grace * self.eta**i < self.max_epochs]

    def record(self, trial: int, epoch: int, vector: Sequence[float]) -> None:
        if epoch in self.epochs:
            self.records.setdefault(epoch, {})[trial] = tuple(float(v) for v in vector)

    def should_stop(self, trial: int, epoch: int, vector: Sequence[float]) -> bool:
        """Record the trial at ``epoch`` and decide whether it stops there."""
        if epoch not in self.epochs:
            return False
        self.record(trial, epoch, vector)
        peers = self.records[epoch]
        if len(peers) < max(self.eta, self.min_peers):
            return False
        ids = list(peers)
        points = to_minimization([peers[i] for i in ids], self.directions)
        ranks, order = priority_order(points)
        me = ids.index(trial)
        dominated = (bool(ranks[me] != 0) if self.samples is None
                     else self._beaten_beyond_noise(points, [peers[i][0] for i in ids], me))
        if self.keep_nondominated and not dominated:
            return False
        keep = set(order[: max(1, len(ids) // self.eta)])
        return me not in keep

    def _beaten_beyond_noise(self, points: np.ndarray, metric: list[float], me: int) -> bool:
        """Whether a peer beats row ``me`` of ``points`` (minimisation, the metric first) by
        more than the metric's noise on ``samples`` validation samples, at no higher cost."""
        assert self.samples is not None
        p = np.clip(np.asarray(metric, dtype=float), 0.0, 1.0)
        variance = p * (1 - p) / self.samples
        margin = self.noise_z * np.sqrt(variance + variance[me])
        beaten = ((points[:, 0] + margin < points[me, 0])
                  & np.all(points[:, 1:] <= points[me, 1:], axis=1))
        beaten[me] = False
        return bool(beaten.any())


class MultiObjectiveASHA(FIFOScheduler):
    """Tune scheduler: STOP a trial at a rung where :class:`Rungs` says so.

    It reads the per-epoch reports of ``studies.worker.trainable`` (``studies.tune_report``'s
    ``EpochResult``: its epoch and value) and each trial's ``number`` and ``cost_vector`` from
    its config. ``on_stop`` is
    told the Tune id of each trial it stops and the epoch it stops at (the searcher records
    the trial as stopped when Tune ends it).
    """

    def __init__(self, rungs: Rungs, *,
                 on_stop: Callable[[str, int], None] | None = None) -> None:
        super().__init__()
        self.rungs = rungs
        self.on_stop = on_stop

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
        if kind_of(result) != "epoch":
            return TrialScheduler.CONTINUE
        report = EpochResult.from_tune(result)
        if not isinstance(report.value, (int, float)):
            return TrialScheduler.CONTINUE
        vector = [float(report.value), *trial.config.get("cost_vector", [])]
        epoch = report.epoch
        if self.rungs.should_stop(int(trial.config["number"]), epoch, vector):
            if self.on_stop is not None:
                self.on_stop(trial.trial_id, epoch)
            return TrialScheduler.STOP
        return TrialScheduler.CONTINUE

    def debug_string(self) -> str:
        return f"Multi-objective ASHA with rungs at epochs {self.rungs.epochs}."
