"""An Optuna sampler timed per trial, for ``benchmarks/cluster.py``'s Tune peer: the seconds
its inner sampler spends on a trial (search space, relative and independent draws, the hook
before the trial) are recorded on the trial when it is told, as the system attribute
:data:`PEER_SECONDS`, beside ``costaware``'s own ``costaware:seconds``. A module of its own:
Tune pickles its searcher, sampler included, by reference to an importable class."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState

__all__ = ["PEER_SECONDS", "TimedSampler"]

#: The trial system attribute where :class:`TimedSampler` records its sampler's seconds.
PEER_SECONDS = "bench:suggest_seconds"

_T = TypeVar("_T")


class TimedSampler(optuna.samplers.BaseSampler):
    """``inner`` with the seconds it spends on each trial recorded on the trial when told."""

    def __init__(self, inner: optuna.samplers.BaseSampler) -> None:
        self.inner = inner
        self.spent: dict[int, float] = {}

    def _timed(self, trial: FrozenTrial, call: Callable[[], _T]) -> _T:
        began = time.perf_counter()
        try:
            return call()
        finally:
            self.spent[trial._trial_id] = (self.spent.get(trial._trial_id, 0.0)
                                           + time.perf_counter() - began)

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial
                                    ) -> dict[str, BaseDistribution]:
        return self._timed(trial, lambda: self.inner.infer_relative_search_space(study, trial))

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return self._timed(trial, lambda: self.inner.sample_relative(study, trial,
                                                                     search_space))

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self._timed(trial, lambda: self.inner.sample_independent(
            study, trial, param_name, param_distribution))

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self._timed(trial, lambda: self.inner.before_trial(study, trial))

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self.inner.after_trial(study, trial, state, values)
        study._storage.set_trial_system_attr(trial._trial_id, PEER_SECONDS,
                                             self.spent.pop(trial._trial_id, 0.0))

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()
