"""``costaware``: a sampler that knows what each architecture costs before it trains it.

The peers a study is compared with (Ray Tune + ``OptunaSearch``, Syne Tune) learn a trial's
parameters and MAdds only once it has run, like its accuracy. This engine computes both exactly
on the meta device before training (``nas.cost``), so its sampler need only learn accuracy:

1. candidate architectures are drawn and costed (those that break a constraint are dropped, as
   the engine would reject them): ``candidates`` at random from the study's space, and
   ``mutations`` neighbours of the current front's trials (one or two parameters drawn again);
   while fewer than ``early_trials`` trials have finished, ``early_candidates`` and
   ``early_mutations`` instead (where more): a small study's few trials are worth a wider look,
   and a large one's pool already holds many (``benchmarks/tabular.py`` at 10-50 trials). They
   join the candidates costed for earlier trials and not trained since (the ``pool`` most
   recent): costs do not change, so each suggestion costs only its new draws;
2. a Gaussian process over the trials so far predicts each candidate's accuracy at the full
   epochs (a stopped trial is an observation at the epoch it reached: the fidelity is an input
   of the model, so stopped trials teach it without passing as finished). Past ``max_points``
   trials it is fitted to the front and a random share of the rest, and its length scale and
   noise are searched again only when the trials have grown by a quarter since the last search;
3. the candidate with the largest expected improvement of the normalised hypervolume (the
   study's fixed reference point, ``studies.pareto``) over the front of the trials trained to
   the full epochs and of the trials still running at their predicted accuracy is the trial's
   architecture. The model, too, counts a running trial as observed at its prediction (the
   kriging believer; in the start-up, the prior conditioned on them): near one it is as sure
   as if that trial had finished, so trials asked at once spread over architectures instead
   of training the cheapest at many learning rates. With the costs exact and the accuracy
   Gaussian, the expectation has a closed form (``studies._ehvi``): no sampling. The expected
   gain of the chosen candidate is recorded on the trial (system attribute :data:`GAIN_KEY`):
   what ``studies.convergence`` reads.

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
import time
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
from threadpoolctl import ThreadpoolController

from studies._draw import DrawnTrial
from studies._ehvi import expected_gains, tile
from studies._gp import MIN_SPREAD, GaussianProcess
from studies.convergence import binomial_sd, hypervolume_noise
from studies.pareto import fill_reference, ideal_point, scale_to_reference, to_minimization
from studies.store.keys import SamplerKey

__all__ = ["DEFAULT_POOL", "GAIN_KEY", "MIN_SPREAD", "NOISE_KEY", "SECONDS_KEY", "STARTUPS",
           "CostAwareSampler", "Costing", "bind", "cost_aware"]

#: The trial system attribute that holds the expected hypervolume gain of the candidate the
#: sampler chose for it (a float, on the normalised scale of ``studies.pareto``).
GAIN_KEY = SamplerKey.GAIN
#: The trial system attribute that holds the hypervolume's noise when it was chosen (the
#: standard deviation the front's measured metric gives it, ``studies.convergence``), where the
#: costing tells the metric's validation samples.
NOISE_KEY = SamplerKey.NOISE
#: The trial system attribute that holds the seconds the sampler took to choose it (drawing and
#: costing the candidates, the model, the expected gains).
SECONDS_KEY = SamplerKey.SECONDS

#: The candidates kept between suggestions where ``pool`` is not given (or ``candidates +
#: mutations``, where more).
DEFAULT_POOL = 64

#: How the start-up trials are chosen: by cost under one prior on the metric, or at random.
STARTUPS = ("cost", "random")
#: The start-up's model of how alike two candidates score, for the trials still running (no
#: trial has finished to fit one): a length scale in units of sqrt(dimensions) / 2, and the
#: noise variance of a running trial's believed score (the grid's of ``studies._gp``).
_SCALE, _PENDING_NOISE = 0.5, 1e-2


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
    finished trial, ``samples`` the validation samples the metric (a share of them) is measured
    on: the hypervolume's noise recorded with each choice (None: unknown, none recorded).
    """

    cost_of: Callable[[optuna.Trial], tuple[str, list[float]] | None]
    key_of: Callable[[dict[str, Any]], str | None]
    metric: int
    directions: Sequence[str]
    reference: Sequence[float | None] | None
    full_epochs: int
    samples: int | None = None


def cost_aware(sampler: optuna.samplers.BaseSampler) -> bool:
    """Whether ``sampler`` (or the sampler it wraps) takes the study's costing."""
    return isinstance(getattr(sampler, "inner", sampler), CostAwareSampler)


def bind(sampler: optuna.samplers.BaseSampler, costing: Costing) -> bool:
    """Give ``sampler`` (or the sampler it wraps) the study's costing, if it takes one."""
    inner = getattr(sampler, "inner", sampler)
    if isinstance(inner, CostAwareSampler):
        inner.costing = costing
        return True
    return False


def _set_system_attrs(study: optuna.Study, trial_id: int, attrs: dict[str, Any]) -> None:
    """Record ``attrs`` with the trial: in one transaction where the study's storage offers it
    (the engine's asking storage, ``studies.store._snapshot``), else one at a time."""
    storage = study._storage
    together = getattr(storage, "set_trial_system_attrs", None)
    if callable(together):
        together(trial_id, attrs)
        return
    for key, value in attrs.items():
        storage.set_trial_system_attr(trial_id, key, value)


def _encode(params: dict[str, Any], dists: dict[str, BaseDistribution],
            names: Sequence[str]) -> list[float]:
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


#: A candidate: its parameters, cost objectives and what it trains.
Candidate = tuple[dict[str, Any], list[float], str]
#: A trial's chosen candidate while it runs: its parameters, cost objectives, predicted metric.
_Chosen = tuple[dict[str, Any], list[float], float]


def _running_rows(running: list[_Chosen], dists: dict[str, BaseDistribution],
                  names: tuple[str, ...]) -> np.ndarray:
    """The model inputs of the trials still running, at the full epochs."""
    return np.array([[*_encode(params, dists, names), 1.0] for params, _, _ in running])


class _Memory:
    """What the sampler has read of a study's finished trials, kept between suggestions so a
    suggestion reads each trial once: each observation's parameters, input row and fidelity,
    the front of the trials trained to the full epochs, and each objective's largest value."""

    def __init__(self) -> None:
        self.seen: set[int] = set()
        self.ids: list[int] = []  # observations, in the order read
        self.params: dict[int, dict[str, Any]] = {}
        self.dists: dict[str, BaseDistribution] = {}  # every observation's parameters'
        self.fidelity: dict[int, float] = {}
        self.metric: dict[int, float] = {}
        self.front: dict[int, np.ndarray] = {}  # trial id -> its values, minimised
        self.values: dict[int, list[float]] = {}
        self.largest: np.ndarray | None = None
        self.rows: dict[int, list[float]] = {}
        self.names: tuple[str, ...] = ()
        #: Candidates costed in earlier suggestions and not trained yet, by key, the most
        #: recent last (their costs do not change: costing them again would only cost time),
        #: and the distributions they were drawn from.
        self.pool: dict[str, tuple[dict[str, Any], list[float]]] = {}
        self.pool_dists: dict[str, BaseDistribution] = {}
        self.encoded: dict[str, list[float]] = {}  # by candidate key, under ``names``
        #: The last noise computed, and the front's trial ids and the reference it is for.
        self._noise: tuple[tuple[tuple[int, ...], tuple[float, ...]], float] | None = None

    def remember(self, drawn: list[Candidate], dists: dict[str, BaseDistribution],
                 known: set[str | None], size: int) -> list[Candidate]:
        """Add ``drawn`` to the pool, drop what is ``known`` (trained or running) and the
        oldest past ``size``; the pool's candidates."""
        for params, costs, key in drawn:
            self.pool.pop(key, None)
            self.pool[key] = (params, costs)
        self.pool_dists.update(dists)
        for key in [k for k in self.pool if k in known]:
            del self.pool[key]
            self.encoded.pop(key, None)
        while len(self.pool) > size:
            self.encoded.pop(next(iter(self.pool)), None)
            del self.pool[next(iter(self.pool))]
        return [(params, costs, key) for key, (params, costs) in self.pool.items()]

    def read(self, trials: Sequence[FrozenTrial], costing: Costing) -> None:
        m, signs = costing.metric, to_minimization([[1.0] * len(costing.directions)],
                                                   costing.directions)[0]
        for t in trials:
            if (t._trial_id in self.seen or t.state != TrialState.COMPLETE or t.values is None
                    or len(t.values) != len(costing.directions)):
                continue
            self.seen.add(t._trial_id)
            reached = max(t.intermediate_values) if t.intermediate_values else None
            self.ids.append(t._trial_id)
            self.params[t._trial_id] = dict(t.params)
            self.dists.update(t.distributions)
            self.metric[t._trial_id] = float(t.values[m])
            self.fidelity[t._trial_id] = (1.0 if reached is None else
                                          min(1.0, reached / max(1, costing.full_epochs)))
            values = np.asarray(t.values, dtype=float)
            self.largest = values if self.largest is None else np.maximum(self.largest, values)
            if reached is None or reached >= costing.full_epochs:
                self._add_to_front(t._trial_id, values * signs, list(t.values))

    def noise(self, costing: Costing, reference: Sequence[float] | np.ndarray) -> float | None:
        """The hypervolume's noise from the front's measured metric (binomial on the costing's
        validation samples), computed again only when the front or the reference changed."""
        if costing.samples is None or not self.values:
            return None
        key = (tuple(self.values), tuple(float(r) for r in reference))
        if self._noise is None or self._noise[0] != key:
            front = list(self.values.values())
            metric = [v[costing.metric] for v in front]
            self._noise = (key, hypervolume_noise(
                front, costing.directions, reference, costing.metric,
                binomial_sd(metric, costing.samples)))
        return self._noise[1]

    def _add_to_front(self, trial_id: int, point: np.ndarray, values: list[float]) -> None:
        for other in self.front.values():
            if np.all(other <= point) and np.any(other < point):
                return
        beaten = [i for i, other in self.front.items()
                  if np.all(point <= other) and np.any(point < other)]
        for i in beaten:
            del self.front[i]
            del self.values[i]
        self.front[trial_id], self.values[trial_id] = point, values

    def candidate_row(self, candidate: Candidate, dists: dict[str, BaseDistribution],
                      names: tuple[str, ...]) -> list[float]:
        """A candidate's model input at the full epochs, encoded once per key."""
        if names != self.names:
            self.rows, self.encoded, self.names = {}, {}, names
        key = candidate[2]
        if key not in self.encoded:
            self.encoded[key] = [*_encode(candidate[0], dists, names), 1.0]
        return self.encoded[key]

    def row(self, trial_id: int, dists: dict[str, BaseDistribution],
            names: tuple[str, ...]) -> list[float]:
        if names != self.names:  # a parameter seen for the first time: encode again
            self.rows, self.encoded, self.names = {}, {}, names
        if trial_id not in self.rows:
            self.rows[trial_id] = [*_encode(self.params[trial_id], dists, names),
                                   self.fidelity[trial_id]]
        return self.rows[trial_id]


class CostAwareSampler(optuna.samplers.BaseSampler):
    """See the module: candidates costed exactly, accuracy from a Gaussian process, the largest
    expected hypervolume improvement (closed form) trained."""

    def __init__(self, *, seed: int | None = None, candidates: int = 8, mutations: int = 8,
                 early_trials: int = 50, early_candidates: int = 24, early_mutations: int = 16,
                 pool: int | None = None, n_startup_trials: int = 2, startup: str = "cost",
                 max_points: int = 256) -> None:
        early = (max(early_candidates, candidates), max(early_mutations, mutations))
        most = sum(early) if early_trials > 0 else candidates + mutations
        pool = max(DEFAULT_POOL, most) if pool is None else pool
        if (candidates < 1 or mutations < 0 or early_trials < 0 or early_candidates < 0
                or early_mutations < 0 or n_startup_trials < 0 or max_points < 2
                or pool < most):
            raise ValueError("candidates must be at least 1, mutations, early_trials, "
                             "early_candidates, early_mutations and n_startup_trials at least "
                             "0, max_points at least 2, pool at least the most candidates + "
                             "mutations drawn for one trial")
        if startup not in STARTUPS:
            raise ValueError(f"startup must be one of {', '.join(STARTUPS)}, not {startup!r}")
        self.startup = startup
        self._rng = np.random.default_rng(seed)
        self._random = optuna.samplers.RandomSampler(seed=seed)
        self.candidates, self.mutations, self.n_startup_trials, self.max_points = (
            candidates, mutations, n_startup_trials, max_points)
        self.early_trials, self.early = early_trials, early
        self.pool = pool
        self._threads: ThreadpoolController | None = None
        self.costing: Costing | None = None
        #: By trial id: the parameters chosen for it, its cost objectives and predicted metric.
        self._chosen: dict[int, _Chosen] = {}
        self._keys: dict[int, str | None] = {}  # by trial id: what its parameters train
        self._memory: dict[int, _Memory] = {}  # by study id
        self._hyper: tuple[float, float] | None = None  # the GP's, and the trials it saw
        self._hyper_at = 0

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
        began = time.perf_counter()
        trials = study.get_trials(deepcopy=False)
        memory = self._memory.setdefault(study._study_id, _Memory())
        memory.read(trials, costing)
        if len(memory.ids) < self.n_startup_trials and self.startup == "random":
            return
        drawn, dists = self._draw(costing, memory)
        known = {self._key(costing, t) for t in trials}  # reuse teaches nothing
        fresh = memory.remember(drawn, dists, known, self.pool)
        dists = dict(memory.pool_dists)
        if fresh:
            # One BLAS thread: the driver shares its cores with the trials, and a second
            # thread waiting on a busy core made a small solve 30 times slower (measured).
            if self._threads is None:  # finding the BLAS libraries takes milliseconds: once
                self._threads = ThreadpoolController()
            with self._threads.limit(limits=1, user_api="blas"):
                chosen, gain, noise = self._choose(costing, memory, fresh, dists)
            self._chosen[trial._trial_id] = chosen
            recorded: dict[str, Any] = {GAIN_KEY: gain}
            if noise is not None:
                recorded[NOISE_KEY] = noise
            recorded[SECONDS_KEY] = time.perf_counter() - began
            _set_system_attrs(study, trial._trial_id, recorded)

    def draws(self, finished: int) -> tuple[int, int]:
        """The random candidates and the neighbours of the front drawn for a trial when
        ``finished`` trials have finished (stopped ones included)."""
        return self.early if finished < self.early_trials else (self.candidates, self.mutations)

    # ------------------------------------------------------------------ steps
    def _key(self, costing: Costing, trial: FrozenTrial) -> str | None:
        if trial._trial_id not in self._keys and trial.params:
            self._keys[trial._trial_id] = costing.key_of(dict(trial.params))
        return self._keys.get(trial._trial_id)

    def _draw(self, costing: Costing, memory: _Memory
              ) -> tuple[list[Candidate], dict[str, BaseDistribution]]:
        """Candidates that meet the constraints, with their cost objectives and keys (random
        draws, then neighbours of the front's trials), and the distributions they were drawn
        from."""
        parents = [memory.params[i] for i in memory.front]
        candidates, mutations = self.draws(len(memory.ids))
        fixed: list[dict[str, Any]] = [{} for _ in range(candidates)]
        for _ in range(mutations if parents else 0):
            params = dict(parents[int(self._rng.integers(len(parents)))])
            names = sorted(params)
            redraw = 1 + int(self._rng.random() < 0.5)
            for k in self._rng.choice(len(names), size=min(len(names), redraw), replace=False):
                del params[names[int(k)]]  # drawn again at random
            fixed.append(params)
        out: list[Candidate] = []
        dists: dict[str, BaseDistribution] = {}
        keys: set[str] = set()
        for given in fixed:
            t = DrawnTrial(self._rng, given)
            got = costing.cost_of(t)  # type: ignore[arg-type]  # drawn as an Optuna trial is
            if got is not None and got[0] not in keys:
                keys.add(got[0])
                out.append((t.params, got[1], got[0]))
                dists.update(t.distributions)
        return out, dists

    def _predict(self, memory: _Memory, drawn: list[Candidate],
                 dists: dict[str, BaseDistribution], pending: list[_Chosen]
                 ) -> tuple[np.ndarray, np.ndarray]:
        """The GP's predicted metric at the full epochs for each candidate (mean, sd), the
        trials still running (``pending``: their parameters and predicted metric) counted as
        observed at that prediction (the kriging believer: near a running trial the model is
        as sure as if it had finished as predicted, so trials asked at once spread out)."""
        names = tuple(sorted(dists))
        ids = memory.ids
        if len(ids) > self.max_points:  # the front, and a random share of the rest
            front = [i for i in memory.front if i in memory.params][: self.max_points // 2]
            chosen = set(front)
            rest = [i for i in ids if i not in chosen]
            pick = self._rng.choice(len(rest), size=self.max_points - len(front), replace=False)
            ids = front + [rest[int(k)] for k in sorted(pick)]
        x = np.array([memory.row(i, dists, names) for i in ids])
        y = np.array([memory.metric[i] for i in ids])
        xc = np.array([memory.candidate_row(c, dists, names) for c in drawn])
        if self._hyper is None or len(memory.ids) >= 1.25 * self._hyper_at:
            # length scale and noise searched on the finished trials alone
            searched = GaussianProcess(x, y)
            self._hyper, self._hyper_at = searched.hyper, len(memory.ids)
            if not pending:
                return searched.predict(xc)
        if pending:
            x = np.vstack([x, _running_rows(pending, dists, names)])
            y = np.concatenate([y, [metric for _, _, metric in pending]])
        return GaussianProcess(x, y, hyper=self._hyper).predict(xc)

    @staticmethod
    def _running_spread(drawn: list[Candidate], dists: dict[str, BaseDistribution],
                        pending: list[_Chosen], memory: _Memory) -> np.ndarray:
        """In the start-up, the share of the prior's spread left to each candidate by the
        trials still running, counted as observed at the prior's mean: 1 far from them, near
        0 at one (the same architecture with a close learning rate)."""
        names = tuple(sorted(dists))
        xp = _running_rows(pending, dists, names)
        xc = np.array([memory.candidate_row(c, dists, names) for c in drawn])
        length = _SCALE * math.sqrt(max(1, xp.shape[1])) / 2
        gp = GaussianProcess(xp, np.zeros(len(xp)), hyper=(length, _PENDING_NOISE))
        return gp.predict(xc)[1] / gp.std

    def _choose(self, costing: Costing, memory: _Memory, drawn: list[Candidate],
                dists: dict[str, BaseDistribution]
                ) -> tuple[tuple[dict[str, Any], list[float], float], float, float | None]:
        """The candidate with the largest expected hypervolume improvement (its parameters,
        costs and predicted metric), that expected improvement, and the hypervolume's noise
        (None where the costing does not tell the validation samples)."""
        m, directions = costing.metric, list(costing.directions)
        dists = {**memory.dists, **dists}
        running = list(self._chosen.values())
        if len(memory.ids) < max(1, self.n_startup_trials):  # start-up: one prior for all
            ref = fill_reference(costing.reference, [], directions)[m]
            best = ideal_point(directions)[m]
            mu = np.full(len(drawn), (ref + best) / 2)
            sd = np.full(len(drawn), abs(best - ref) / 4)
            if running:
                sd = sd * self._running_spread(drawn, dists, running, memory)
        else:
            mu, sd = self._predict(memory, drawn, dists, running)

        def vector(metric: float, cost: list[float]) -> list[float]:
            return [*cost[:m], metric, *cost[m:]]

        pending = [vector(predicted, c) for _, c, predicted in running]
        base = list(memory.values.values()) + pending
        largest = [memory.largest.tolist()] if memory.largest is not None else []
        reference = fill_reference(costing.reference, [*largest, *base,
                                                        *(vector(0.0, c) for _, c, _ in drawn)],
                                   directions)
        scaled = scale_to_reference(base, directions, reference)
        tiling = tile(scaled, m)
        # the metric's scaled image is linear in it: y = 1 - (a - ref) / (ideal - ref)
        span = ideal_point(directions)[m] - reference[m]
        span = span if span != 0 else 1.0
        cost_rows = scale_to_reference([vector(reference[m], c) for _, c, _ in drawn],
                                       directions, reference)
        gains = expected_gains(tiling, np.delete(cost_rows, m, axis=1),
                               1.0 - (mu - reference[m]) / span, sd / abs(span))
        best_i = int(np.argmax(gains))
        params, cost, key = drawn[best_i]
        # It trains now: a trial asked before this one has its parameters must not get it too.
        memory.pool.pop(key, None)
        memory.encoded.pop(key, None)
        return ((params, cost, float(mu[best_i])), float(gains[best_i]),
                memory.noise(costing, reference))
