"""``costaware``: a sampler that knows what each architecture costs before it trains it.

The peers a study is compared with (Ray Tune + ``OptunaSearch``, Syne Tune) learn a trial's
parameters and MAdds only once it has run, like its accuracy. This engine computes both exactly
on the meta device before training (``nas.cost``), so its sampler need only learn accuracy:

1. ``candidates`` architectures are drawn at random from the study's space and costed (those
   that break a constraint are dropped, as the engine would reject them);
2. a Gaussian process over the trials so far predicts each candidate's accuracy at the full
   epochs (a stopped trial is an observation at the epoch it reached: the fidelity is an input
   of the model, so stopped trials teach it without passing as finished);
3. the candidate with the largest expected improvement of the normalised hypervolume (the
   study's fixed reference point, ``studies.pareto``; Monte-Carlo over the predicted accuracy,
   the costs exact) over the trials trained to the full epochs, and over the trials still
   running at their predicted accuracy, is the trial's architecture.

Its first ``n_startup_trials`` (2) trials, before the model has anything to learn from, are
chosen by cost alone (``startup: cost``): every candidate gets the same prior on the metric
(centred between the reference point and the ideal, a quarter of that span wide), so the
largest expected improvement goes to the architectures cheapest in every cost objective, which
span most of a front's hypervolume (``benchmarks/rungs.py``: the 6 cheapest of 24 trained
architectures beat 6 random ones). ``startup: random`` draws them at random instead (the draws
of Optuna's random sampler with the same seed, as GP's and TPE's start-up). The engine binds
the study's space and costs to it (:func:`bind`) when a run starts; unbound (a study read by
another tool) it draws at random. It needs every objective other than the metric to be a cost
known before training (``params``, ``madds``): a study file with a measured objective
(``latency_ms``) is refused (``studies.spec``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import FrozenTrial, TrialState

from studies.pareto import fill_reference, hypervolume, ideal_point, scale_to_reference

__all__ = ["CostAwareSampler", "Costing", "bind"]

@dataclass(frozen=True)
class Costing:
    """What the engine tells the sampler about its study.

    ``cost_of`` maps a trial whose parameters are drawn but not yet mapped to the space (an
    Optuna trial of a scratch study) to what it trains (a key: the same network with the same
    settings has the same key) and its cost objectives in objective order, or None where the
    space refuses it or it breaks a constraint; ``key_of`` gives the key of a trial's
    parameters (None where they map to nothing). ``metric`` is the index of the metric
    objective, ``directions`` every objective's, ``reference`` the study's fixed reference
    point (None, or a None entry: derived from the trials), ``full_epochs`` the epochs of a
    finished trial.
    """

    cost_of: Callable[[optuna.Trial], tuple[str, list[float]] | None]
    key_of: Callable[[dict[str, Any]], str | None]
    metric: int
    directions: Sequence[str]
    reference: Sequence[float | None] | None
    full_epochs: int


def bind(sampler: optuna.samplers.BaseSampler, costing: Costing) -> bool:
    """Give ``sampler`` (or the sampler it wraps) the study's costing, if it takes one."""
    inner = getattr(sampler, "inner", sampler)
    if isinstance(inner, CostAwareSampler):
        inner.costing = costing
        return True
    return False


# ----------------------------------------------------------------------------- the model
def _encode(params: dict[str, Any], dists: dict[str, BaseDistribution],
            names: list[str]) -> list[float]:
    """Parameters as numbers in [0, 1] (log scale where the distribution is; one column per
    choice of a categorical); a parameter the trial did not draw sits at the middle / zeros."""
    out: list[float] = []
    for name in names:
        dist, value = dists[name], params.get(name)
        if isinstance(dist, CategoricalDistribution):
            col = [0.0] * len(dist.choices)
            if value is not None and value in dist.choices:
                col[dist.choices.index(value)] = 1.0
            out += col
        elif isinstance(dist, (FloatDistribution, IntDistribution)):
            if value is None or dist.high == dist.low:
                out.append(0.5)
                continue
            low, high, x = float(dist.low), float(dist.high), float(value)
            if dist.log:
                low, high, x = math.log(low), math.log(high), math.log(max(x, dist.low))
            out.append(min(1.0, max(0.0, (x - low) / (high - low))))
    return out


#: How the start-up trials are chosen: by cost under one prior on the metric, or at random.
STARTUPS = ("cost", "random")

#: The smallest spread of the metric the model assumes (its units: 5 points of accuracy), so
#: that a few trials that scored alike do not make it sure of every other architecture.
MIN_SPREAD = 0.05


class _GP:
    """A Gaussian process with a squared-exponential kernel on standardised targets; length
    scale and noise picked from a small grid by the marginal likelihood."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        self.mean, self.std = float(y.mean()), max(float(y.std()), MIN_SPREAD)
        z = (y - self.mean) / self.std
        self.x = x
        dim = max(1, x.shape[1])
        best = -math.inf
        for scale in (0.25, 0.5, 1.0, 2.0):
            length = scale * math.sqrt(dim) / 2
            for noise in (1e-3, 1e-2, 1e-1, 0.3):
                k = self._kernel(x, x, length) + noise * np.eye(len(x))
                try:
                    chol = np.linalg.cholesky(k)
                except np.linalg.LinAlgError:
                    continue
                alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, z))
                fit = -0.5 * z @ alpha - np.log(np.diag(chol)).sum()
                if fit > best:
                    best, self.length, self.chol, self.alpha = fit, length, chol, alpha

    @staticmethod
    def _kernel(a: np.ndarray, b: np.ndarray, length: float) -> np.ndarray:
        d = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
        return np.exp(-0.5 * d / length**2)

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ks = self._kernel(x, self.x, self.length)
        mu = ks @ self.alpha
        v = np.linalg.solve(self.chol, ks.T)
        var = np.clip(1.0 - (v**2).sum(0), 1e-9, None)
        return self.mean + self.std * mu, self.std * np.sqrt(var)


# ----------------------------------------------------------------------------- the sampler
class CostAwareSampler(optuna.samplers.BaseSampler):
    """See the module: random candidates costed exactly, accuracy from a Gaussian process,
    the largest expected hypervolume improvement trained."""

    def __init__(self, *, seed: int | None = None, candidates: int = 24,
                 n_startup_trials: int = 2, mc_samples: int = 32,
                 startup: str = "cost") -> None:
        if candidates < 1 or n_startup_trials < 0 or mc_samples < 1:
            raise ValueError("candidates and mc_samples must be at least 1, n_startup_trials "
                             "at least 0")
        if startup not in STARTUPS:
            raise ValueError(f"startup must be one of {', '.join(STARTUPS)}, not {startup!r}")
        self.startup = startup
        self._rng = np.random.default_rng(seed)
        self._random = optuna.samplers.RandomSampler(seed=seed)
        self.candidates, self.n_startup_trials, self.mc_samples = (
            candidates, n_startup_trials, mc_samples)
        self.costing: Costing | None = None
        #: By trial id: the parameters chosen for it, its cost objectives and predicted metric.
        self._chosen: dict[int, tuple[dict[str, Any], list[float], float]] = {}
        self._keys: dict[int, str | None] = {}  # by trial id: what its parameters train

    def reseed_rng(self) -> None:
        self._random.reseed_rng()
        self._rng = np.random.default_rng()

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial
                                    ) -> dict[str, BaseDistribution]:
        return {}

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return {}

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        chosen = self._chosen.get(trial._trial_id)
        if chosen is not None and param_name in chosen[0]:
            value = chosen[0][param_name]
            if param_distribution._contains(param_distribution.to_internal_repr(value)):
                return value
        return self._random.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self._chosen.pop(trial._trial_id, None)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        costing = self.costing
        if costing is None or trial.system_attrs.get("fixed_params"):  # an enqueued trial
            return
        trials = study.get_trials(deepcopy=False)
        observed = [t for t in trials if t.state == TrialState.COMPLETE and t.values is not None
                    and len(t.values) == len(costing.directions)]
        if len(observed) < self.n_startup_trials and self.startup == "random":
            return
        drawn, dists = self._draw(costing)
        known = {self._key(costing, t) for t in trials}
        fresh = [(p, c) for p, c, key in drawn if key not in known]  # reuse teaches nothing
        if fresh:
            self._chosen[trial._trial_id] = self._choose(costing, observed, fresh, dists)

    # ------------------------------------------------------------------ steps
    def _key(self, costing: Costing, trial: FrozenTrial) -> str | None:
        if trial._trial_id not in self._keys and trial.params:
            self._keys[trial._trial_id] = costing.key_of(dict(trial.params))
        return self._keys.get(trial._trial_id)

    def _draw(self, costing: Costing) -> tuple[list[tuple[dict[str, Any], list[float], str]],
                                               dict[str, BaseDistribution]]:
        """Random candidates that meet the constraints, with their cost objectives, and the
        distributions they were drawn from."""
        scratch = optuna.create_study(
            sampler=optuna.samplers.RandomSampler(seed=int(self._rng.integers(2**31))))
        out: list[tuple[dict[str, Any], list[float], str]] = []
        dists: dict[str, BaseDistribution] = {}
        keys: set[str] = set()
        for _ in range(self.candidates):
            t = scratch.ask()
            got = costing.cost_of(t)
            if got is not None and got[0] not in keys:
                keys.add(got[0])
                out.append((dict(t.params), got[1], got[0]))
                dists.update(t.distributions)
        return out, dists

    def _choose(self, costing: Costing, observed: list[FrozenTrial],
                drawn: list[tuple[dict[str, Any], list[float]]],
                dists: dict[str, BaseDistribution]) -> tuple[dict[str, Any], list[float], float]:
        """The candidate with the largest expected hypervolume improvement, its costs and its
        predicted metric."""
        m = costing.metric
        for t in observed:
            dists.update(t.distributions)
        names = sorted(dists)

        def fidelity(t: FrozenTrial) -> float:
            reached = max(t.intermediate_values) if t.intermediate_values else costing.full_epochs
            return min(1.0, reached / max(1, costing.full_epochs))

        if len(observed) < max(1, self.n_startup_trials):  # start-up: one prior for all
            ref = fill_reference(costing.reference, [], costing.directions)[m]
            best = ideal_point(costing.directions)[m]
            mu = np.full(len(drawn), (ref + best) / 2)
            sd = np.full(len(drawn), abs(best - ref) / 4)
        else:
            x = np.array([[*_encode(t.params, dists, names), fidelity(t)] for t in observed])
            y = np.array([float(t.values[m]) for t in observed])
            xc = np.array([[*_encode(p, dists, names), 1.0] for p, _ in drawn])
            mu, sd = _GP(x, y).predict(xc)

        def vector(metric: float, cost: list[float]) -> list[float]:
            return [*cost[:m], metric, *cost[m:]]

        full = [list(t.values) for t in observed if not t.intermediate_values
                or max(t.intermediate_values) >= costing.full_epochs]
        pending = [vector(predicted, c) for _, c, predicted in self._chosen.values()]
        base = full + pending
        directions = list(costing.directions)
        samples = mu[:, None] + sd[:, None] * self._rng.standard_normal((len(drawn),
                                                                         self.mc_samples))
        every = base + [vector(a, c) for (_, c), row in zip(drawn, samples, strict=True)
                        for a in row]
        scaled = scale_to_reference(every, directions, costing.reference)
        ones = np.ones(len(directions))
        front = scaled[:len(base)]
        now = hypervolume(front, ones)
        gains = np.zeros(len(drawn))
        for i in range(len(drawn)):
            block = scaled[len(base) + i * self.mc_samples: len(base) + (i + 1) * self.mc_samples]
            gains[i] = np.mean([hypervolume(np.vstack([front, p[None, :]]), ones) - now
                                for p in block])
        best = int(np.argmax(gains))
        return drawn[best][0], drawn[best][1], float(mu[best])
