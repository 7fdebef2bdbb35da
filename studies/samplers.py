"""Samplers by name: ``{name: nsga2, population_size: 8}`` -> an Optuna sampler."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import optuna

from nas.errors import ConfigError

__all__ = ["SAMPLERS", "make_sampler"]

SAMPLERS: dict[str, type[optuna.samplers.BaseSampler]] = {
    "nsga2": optuna.samplers.NSGAIISampler,
    "nsga3": optuna.samplers.NSGAIIISampler,
    "tpe": optuna.samplers.TPESampler,
    "random": optuna.samplers.RandomSampler,
    "qmc": optuna.samplers.QMCSampler,
    "gp": optuna.samplers.GPSampler,
}
# Options that are objects rather than data, set by the engine or meaningless in a YAML file.
_NOT_OPTIONS = {"self", "seed", "constraints_func", "crossover", "independent_sampler",
                "gamma", "weights", "elite_population_selection_strategy",
                "child_generation_strategy", "after_trial_strategy", "categorical_distance_func",
                "reference_points", "search_space"}


def make_sampler(spec: Mapping[str, Any], seed: int) -> optuna.samplers.BaseSampler:
    """Build the sampler ``spec`` names, seeded; unknown names and options are errors."""
    name = spec.get("name")
    if name not in SAMPLERS:
        raise ConfigError(f"Unknown sampler {name!r}; samplers are {sorted(SAMPLERS)}.")
    cls = SAMPLERS[name]
    allowed = [p for p in inspect.signature(cls.__init__).parameters if p not in _NOT_OPTIONS]
    options = {k: v for k, v in spec.items() if k != "name"}
    for key in options:
        if key not in allowed:
            raise ConfigError(
                f"Unknown option {key!r} for sampler {name!r}; its options are {sorted(allowed)}."
            )
    factory: Any = cls  # every sampler here takes a seed; BaseSampler's signature does not
    try:
        return factory(seed=seed, **options)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"Sampler {name!r}: {exc}") from None
