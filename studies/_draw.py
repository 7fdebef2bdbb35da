"""The trial ``studies.costaware`` draws its candidates on: parameters drawn at random from a
numpy generator (as Optuna's random sampler draws them: uniform, log-uniform where the
distribution is, on its step), or taken from ``fixed`` where given and inside the distribution,
without an Optuna study's bookkeeping (an Optuna trial of a scratch study costs about a
millisecond per parameter; this, microseconds)."""

from __future__ import annotations

import datetime
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalChoiceType,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

__all__ = ["DrawnTrial"]


class DrawnTrial(optuna.trial.BaseTrial):
    """A trial whose every ``suggest_*`` draws from ``rng`` or returns ``fixed``'s value.

    Only the drawing half of a trial: reporting, pruning and attributes raise (a candidate is
    costed, never trained).
    """

    def __init__(self, rng: np.random.Generator, fixed: dict[str, Any] | None = None) -> None:
        self._rng, self._fixed = rng, dict(fixed or {})
        self._params: dict[str, Any] = {}
        self._dists: dict[str, BaseDistribution] = {}

    def _value(self, name: str, dist: BaseDistribution) -> Any:
        if name in self._params:
            return self._params[name]
        value = self._fixed.get(name)
        if name not in self._fixed or not dist._contains(dist.to_internal_repr(value)):
            value = self._draw(dist)
        self._params[name], self._dists[name] = value, dist
        return value

    def _draw(self, dist: BaseDistribution) -> Any:
        rng = self._rng
        if isinstance(dist, CategoricalDistribution):
            return dist.choices[int(rng.integers(len(dist.choices)))]
        if isinstance(dist, FloatDistribution):
            if dist.step is not None:
                steps = round((dist.high - dist.low) / dist.step)
                return float(min(dist.high, dist.low + rng.integers(steps + 1) * dist.step))
            if dist.log:
                return float(math.exp(rng.uniform(math.log(dist.low), math.log(dist.high))))
            return float(rng.uniform(dist.low, dist.high))
        if isinstance(dist, IntDistribution):
            if dist.log:
                drawn = math.exp(rng.uniform(math.log(dist.low - 0.5), math.log(dist.high + 0.5)))
                return int(min(dist.high, max(dist.low, round(drawn))))
            steps = (dist.high - dist.low) // dist.step
            return int(dist.low + rng.integers(steps + 1) * dist.step)
        raise TypeError(f"Cannot draw from {dist!r}.")

    def suggest_float(self, name: str, low: float, high: float, *, step: float | None = None,
                      log: bool = False) -> float:
        return float(self._value(name, FloatDistribution(low, high, log=log, step=step)))

    def suggest_uniform(self, name: str, low: float, high: float) -> float:
        return self.suggest_float(name, low, high)

    def suggest_loguniform(self, name: str, low: float, high: float) -> float:
        return self.suggest_float(name, low, high, log=True)

    def suggest_discrete_uniform(self, name: str, low: float, high: float, q: float) -> float:
        return self.suggest_float(name, low, high, step=q)

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1,
                    log: bool = False) -> int:
        return int(self._value(name, IntDistribution(low, high, log=log, step=step)))

    def suggest_categorical(  # type: ignore[override]  # one signature for Optuna's overloads
            self, name: str, choices: Sequence[CategoricalChoiceType]) -> CategoricalChoiceType:
        return self._value(name, CategoricalDistribution(choices))

    def report(self, value: float, step: int) -> None:
        raise NotImplementedError("A drawn candidate is costed, never trained: no report.")

    def should_prune(self) -> bool:
        raise NotImplementedError("A drawn candidate is costed, never trained: no pruning.")

    def set_user_attr(self, key: str, value: Any) -> None:
        raise NotImplementedError("A drawn candidate keeps no attributes.")

    def set_constraint(self, key: str, value: float) -> None:
        raise NotImplementedError("A drawn candidate keeps no constraints.")

    @property
    def params(self) -> dict[str, Any]:
        return dict(self._params)

    @property
    def distributions(self) -> dict[str, BaseDistribution]:
        return dict(self._dists)

    @property
    def user_attrs(self) -> dict[str, Any]:
        return {}

    @property
    def datetime_start(self) -> datetime.datetime | None:
        return None
