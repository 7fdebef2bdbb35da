"""Samplers by name: ``{name: tpe, n_startup_trials: 4}`` -> an Optuna sampler.

Every sampler that learns from past trials sees the study through :class:`StoppedTrialsView`:
a trial the scheduler stopped early (stored ``PRUNED``, no values) appears to it as finished
with its objective vector at the epoch it reached (the metric there, the cost objectives as
computed before training). Without that, a study whose early stopping stops most trials
teaches its sampler nothing (NSGA-II builds generations only from finished trials, GP reads
only those) or breaks it (Optuna's multi-objective TPE raises on a pruned trial with
intermediate values). Only the sampler's view changes: the stored record, the Pareto front
and the hypervolume still count only trials trained to the full epochs.

``auto`` is NSGA-II whose first generation (and the parameters it mutates) are drawn by a
multivariate TPE: TPE while the trials are few, evolution once a generation has filled.
``costaware`` (``studies.costaware``) learns only the metric: it costs candidate architectures
exactly before choosing one.
"""

from __future__ import annotations

import copy
import inspect
import math
from collections.abc import Callable, Container, Mapping, Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState

from nas.errors import ConfigError
from studies.costaware import CostAwareSampler

__all__ = ["RETIRED_OPTIONS", "SAMPLERS", "StoppedTrialsView", "make_sampler",
           "stopped_values"]

def _tpe(*, seed: int | None = None, multivariate: bool = True, constant_liar: bool = True,
         n_startup_trials: int = 4, **options: Any) -> optuna.samplers.TPESampler:
    """Optuna's TPE with the defaults for budgets of tens of trials run two or more at once:
    multivariate, a constant liar for the trials still running, four start-up draws."""
    return optuna.samplers.TPESampler(seed=seed, multivariate=multivariate,
                                      constant_liar=constant_liar,
                                      n_startup_trials=n_startup_trials, **options)


def _gp(*, seed: int | None = None, n_startup_trials: int = 4,
        warn_independent_sampling: bool = False, **options: Any) -> optuna.samplers.GPSampler:
    """Optuna's Gaussian-process sampler, four start-up draws; the parameters a space draws
    only for some architectures (GP models a fixed space) are drawn at random, silently."""
    return optuna.samplers.GPSampler(seed=seed, n_startup_trials=n_startup_trials,
                                     warn_independent_sampling=warn_independent_sampling,
                                     **options)


class _TpeThenNsga2(optuna.samplers.NSGAIISampler):
    """NSGA-II whose first generation a multivariate TPE draws (and whose mutated and
    conditional parameters TPE draws one by one), instead of Optuna's random draws."""

    def __init__(self, *, population_size: int, seed: int | None, n_startup_trials: int
                 ) -> None:
        super().__init__(population_size=population_size, seed=seed)
        self._tpe = _tpe(seed=seed, n_startup_trials=n_startup_trials)

    def reseed_rng(self) -> None:
        super().reseed_rng()
        self._tpe.reseed_rng()

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if not self.get_parent_population(study, self.get_trial_generation(study, trial)):
            return self._tpe.sample_relative(study, trial, search_space)
        return super().sample_relative(study, trial, search_space)

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self._tpe.sample_independent(study, trial, param_name, param_distribution)


def _auto(*, seed: int | None = None, population_size: int = 8,
          n_startup_trials: int = 4) -> optuna.samplers.BaseSampler:
    """NSGA-II (``population_size``) whose first generation and mutated parameters a
    multivariate TPE draws (``n_startup_trials`` of them at random)."""
    return _TpeThenNsga2(population_size=population_size, seed=seed,
                         n_startup_trials=n_startup_trials)


Factory = Callable[..., optuna.samplers.BaseSampler]

SAMPLERS: dict[str, Factory] = {
    "nsga2": optuna.samplers.NSGAIISampler,
    "nsga3": optuna.samplers.NSGAIIISampler,
    "tpe": _tpe,
    "gp": _gp,
    "auto": _auto,
    "random": optuna.samplers.RandomSampler,
    "qmc": optuna.samplers.QMCSampler,
    "costaware": CostAwareSampler,
}
#: The samplers that draw without reading past trials: they need no view.
_MEMORYLESS = {"random", "qmc"}
# Options that are objects rather than data, set by the engine or meaningless in a YAML file.
_NOT_OPTIONS = {"self", "seed", "constraints_func", "crossover", "independent_sampler",
                "gamma", "weights", "elite_population_selection_strategy",
                "child_generation_strategy", "after_trial_strategy", "categorical_distance_func",
                "reference_points", "search_space"}


#: Options a sampler took in an earlier release and no longer does, each with why: a study file
#: (or a study stored by that release: it is resumed from the database alone) that sets one is
#: read as if it did not, rather than refused.
RETIRED_OPTIONS: dict[str, dict[str, str]] = {
    "costaware": {
        "mc_samples": "the expected gain has a closed form now (studies._ehvi): no sampling",
    },
}

#: The Optuna sampler a factory passes its other options to (``**options``).
_PASSES_TO: dict[str, type[optuna.samplers.BaseSampler]] = {
    "tpe": optuna.samplers.TPESampler, "gp": optuna.samplers.GPSampler}


def _options(name: str) -> list[str]:
    """The options a study file may set for sampler ``name``: its factory's own and those of
    the Optuna sampler the factory passes the rest to."""
    names = [p for p, v in inspect.signature(SAMPLERS[name]).parameters.items()
             if v.kind is not inspect.Parameter.VAR_KEYWORD]
    if name in _PASSES_TO:
        names += [p for p in inspect.signature(_PASSES_TO[name].__init__).parameters
                  if p not in names]
    return [p for p in names if p not in _NOT_OPTIONS]


def make_sampler(spec: Mapping[str, Any], seed: int) -> optuna.samplers.BaseSampler:
    """Build the sampler ``spec`` names, seeded; unknown names and options are errors, a
    retired option (:data:`RETIRED_OPTIONS`) is ignored."""
    name = spec.get("name")
    if name not in SAMPLERS:
        raise ConfigError(f"Unknown sampler {name!r}; samplers are {sorted(SAMPLERS)}.")
    factory = SAMPLERS[name]
    allowed = _options(name)
    retired = RETIRED_OPTIONS.get(name, {})
    options = {k: v for k, v in spec.items() if k != "name" and k not in retired}
    for key in options:
        if key not in allowed:
            raise ConfigError(
                f"Unknown option {key!r} for sampler {name!r}; its options are {sorted(allowed)}."
            )
    try:
        sampler = factory(seed=seed, **options)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"Sampler {name!r}: {exc}") from None
    return sampler if name in _MEMORYLESS else LearnsFromStopped(sampler)


# ----------------------------------------------------------------------------- stopped trials
def stopped_values(trial: FrozenTrial, objectives: Sequence[Any],
                   study: str) -> list[float] | None:
    """A stopped trial's objective vector at the epoch it reached: the metric objective's last
    intermediate value, each cost objective from its stored cost; ``None`` where one is
    missing (a measured objective such as ``latency_ms`` is measured only after the full
    epochs) or the stored attributes do not parse (``studies.store.stored``)."""
    from studies.store.keys import Status
    from studies.store.stored import StoredValueError, trial_attrs

    if not trial.intermediate_values:
        return None
    try:
        attrs = trial_attrs(study, trial.number, trial.user_attrs)
    except StoredValueError:
        return None
    if attrs.status != Status.STOPPED:
        return None
    result = {"value": trial.intermediate_values[max(trial.intermediate_values)]}
    out = []
    for objective in objectives:
        value = objective.value(attrs.cost or {}, result)
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value):
            return None
        out.append(float(value))
    return out


class StoppedTrialsView(optuna.Study):
    """``study`` as a sampler sees it: each stopped trial (``PRUNED``) whose vector at the epoch
    it reached is known (:func:`stopped_values`) as a ``COMPLETE`` trial with that vector; the
    other pruned trials left out. Reads only; writes go to the study's own storage."""

    def __init__(self, study: optuna.Study, view: Callable[[FrozenTrial], FrozenTrial | None]
                 ) -> None:  # a view over the study's own state: no Study.__init__
        self.__dict__.update(study.__dict__)
        self._view = view

    def _get_trials(self, deepcopy: bool = True, states: Container[TrialState] | None = None,
                    use_cache: bool = False) -> list[FrozenTrial]:
        trials = super()._get_trials(deepcopy=False, states=None, use_cache=use_cache)
        out = []
        for trial in trials:
            seen = self._view(trial) if trial.state == TrialState.PRUNED else trial
            if seen is not None and (states is None or seen.state in states):
                out.append(seen)
        return copy.deepcopy(out) if deepcopy else out


class LearnsFromStopped(optuna.samplers.BaseSampler):
    """``inner`` (an Optuna sampler) reading the study through :class:`StoppedTrialsView`."""

    def __init__(self, inner: optuna.samplers.BaseSampler) -> None:
        self.inner = inner
        self._seen: dict[int, FrozenTrial | None] = {}  # finished trials do not change
        self._objectives: dict[int, Sequence[Any] | None] = {}

    def __str__(self) -> str:
        return f"{type(self.inner).__name__} (learns from stopped trials)"

    def _study_objectives(self, study: optuna.Study) -> Sequence[Any] | None:
        if study._study_id not in self._objectives:
            from studies.objectives import OBJECTIVES
            from studies.store.stored import StoredValueError, study_attrs

            try:
                attrs = study_attrs(study.study_name, study.user_attrs, len(study.directions),
                                    full=False)
                found = [OBJECTIVES.get(name) for name in attrs.objectives]
                self._objectives[study._study_id] = (
                    None if any(o is None for o in found) else found)
            except StoredValueError:
                self._objectives[study._study_id] = None
        return self._objectives[study._study_id]

    def _view(self, study: optuna.Study) -> optuna.Study:
        objectives = self._study_objectives(study)

        def seen(trial: FrozenTrial) -> FrozenTrial | None:
            if trial._trial_id not in self._seen:
                values = (None if objectives is None
                          else stopped_values(trial, objectives, study.study_name))
                self._seen[trial._trial_id] = None if values is None else FrozenTrial(
                    number=trial.number, state=TrialState.COMPLETE, value=None,
                    values=values, datetime_start=trial.datetime_start,
                    datetime_complete=trial.datetime_complete, params=trial.params,
                    distributions=trial.distributions, user_attrs=trial.user_attrs,
                    system_attrs=trial.system_attrs,
                    intermediate_values=trial.intermediate_values, trial_id=trial._trial_id)
            return self._seen[trial._trial_id]

        return StoppedTrialsView(study, seen)

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial
                                    ) -> dict[str, BaseDistribution]:
        return self.inner.infer_relative_search_space(self._view(study), trial)

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return self.inner.sample_relative(self._view(study), trial, search_space)

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self.inner.sample_independent(self._view(study), trial, param_name,
                                             param_distribution)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.inner.before_trial(self._view(study), trial)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self.inner.after_trial(self._view(study), trial, state, values)
