"""Distributions: the values one knob or training key of a search space may take.

Written in YAML as one of::

    {choices: [a, b, ...]}            # categorical (None, bool, int, float or str values)
    {low: 1, high: 8}                 # integers when the key is an integer, else floats
    {low: 1.0e-4, high: 1.0e-2, log: true}
    {low: 0.0, high: 0.3, step: 0.05}

Each distribution draws its value with one ``trial.suggest_*`` call, so Optuna records it as an
ordinary parameter. Numbers must be finite; a range of integers is never materialised
(``IntRange.values()`` is a ``range``), and the space checks its ends against the config's
limits before it looks at the values in between.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from optuna.trial import BaseTrial

from nas.errors import ConfigError

__all__ = ["Choice", "Distribution", "FloatRange", "IntRange", "parse_distribution", "same_value"]

Numeric = Literal["int", "float"] | None
_RANGE_KEYS = ("low", "high", "log", "step")


def same_value(a: Any, b: Any) -> bool:
    """Equality that keeps ``True`` apart from ``1`` (Python's ``==`` does not)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def _fmt(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if isinstance(value, str) else f"{value:g}"


@dataclass(frozen=True)
class Choice:
    """A categorical distribution over a fixed list of scalars."""

    choices: tuple[Any, ...]

    def values(self) -> Sequence[Any]:
        return self.choices

    def contains(self, value: Any) -> bool:
        return any(same_value(value, c) for c in self.choices)

    def suggest(self, trial: BaseTrial, name: str) -> Any:
        value = trial.suggest_categorical(name, list(self.choices))
        # A FixedTrial hands back what it was given (maybe 1 for True): return our own object.
        return next((c for c in self.choices if same_value(c, value)), value)

    def nearest(self, value: Any) -> Any:
        return value if self.contains(value) else self.choices[0]

    def to_dict(self) -> dict[str, Any]:
        return {"choices": list(self.choices)}

    def describe(self) -> str:
        return "one of [" + ", ".join(_fmt(c) for c in self.choices) + "]"


@dataclass(frozen=True)
class IntRange:
    """Integers ``low, low + step, ..., high`` (``high - low`` a multiple of ``step``)."""

    low: int
    high: int
    step: int = 1
    log: bool = False

    def values(self) -> Sequence[int]:
        return range(self.low, self.high + 1, self.step)  # lazy: len() and [i] are O(1)

    def contains(self, value: Any) -> bool:
        return (
            isinstance(value, int) and not isinstance(value, bool)
            and self.low <= value <= self.high and (value - self.low) % self.step == 0
        )

    def suggest(self, trial: BaseTrial, name: str) -> int:
        return int(trial.suggest_int(name, self.low, self.high, step=self.step, log=self.log))

    def nearest(self, value: Any) -> int:
        clamped = min(max(int(value), self.low), self.high)
        return self.low + (clamped - self.low) // self.step * self.step

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"low": self.low, "high": self.high}
        if self.step != 1:
            out["step"] = self.step
        if self.log:
            out["log"] = True
        return out

    def describe(self) -> str:
        step = f" step {self.step}" if self.step != 1 else ""
        return f"int in [{self.low}, {self.high}]{step}" + (" (log)" if self.log else "")


@dataclass(frozen=True)
class FloatRange:
    """Floats in ``[low, high]``, optionally on a log scale or a grid of ``step``."""

    low: float
    high: float
    step: float | None = None
    log: bool = False

    def values(self) -> Sequence[float]:
        return (self.low, self.high)

    def contains(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        tol = 1e-9 * max(1.0, abs(self.high))
        if not self.low - tol <= value <= self.high + tol:
            return False
        if self.step is None:
            return True
        k = (value - self.low) / self.step
        return math.isclose(k, round(k), abs_tol=1e-6)

    def suggest(self, trial: BaseTrial, name: str) -> float:
        return float(trial.suggest_float(name, self.low, self.high, step=self.step, log=self.log))

    def nearest(self, value: Any) -> float:
        clamped = min(max(float(value), self.low), self.high)
        if self.step is None:
            return clamped
        return self.low + round((clamped - self.low) / self.step) * self.step

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"low": self.low, "high": self.high}
        if self.step is not None:
            out["step"] = self.step
        if self.log:
            out["log"] = True
        return out

    def describe(self) -> str:
        step = f" step {self.step:g}" if self.step is not None else ""
        return f"float in [{self.low:g}, {self.high:g}]{step}" + (" (log)" if self.log else "")


Distribution = Choice | IntRange | FloatRange


def _number(where: str, value: Any) -> int | float:
    # PyYAML reads `1e-3` (no dot) as a string: accept the spelling users expect.
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where} must be a number, but got {value!r}.")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where} must be a finite number, but got {value}.")
    return value


def parse_distribution(where: str, raw: Any, numeric: Numeric) -> Distribution:
    """Parse one distribution; ``numeric`` says whether ranges are of ints, floats or refused.

    Raises:
        ConfigError: naming ``where`` (e.g. ``arch.groups``) and the rule broken.
    """
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"{where} must be a distribution such as {{choices: [...]}} or {{low: 1, high: 8}}, "
            f"but got {raw!r}."
        )
    keys = list(raw)
    if "choices" in raw:
        if len(keys) > 1:
            extra = next(k for k in keys if k != "choices")
            raise ConfigError(f"{where}: `choices` cannot be combined with {extra!r}.")
        choices = raw["choices"]
        if not isinstance(choices, list) or not choices:
            raise ConfigError(f"{where}.choices must be a non-empty list, but got {choices!r}.")
        for i, c in enumerate(choices):
            if c is not None and not isinstance(c, (bool, int, float, str)):
                raise ConfigError(
                    f"{where}.choices must hold scalars (null, bool, number or string), but got "
                    f"{c!r}."
                )
            if isinstance(c, float) and not math.isfinite(c):
                raise ConfigError(f"{where}.choices must hold finite numbers, but got {c}.")
            if any(same_value(c, d) for d in choices[:i]):
                raise ConfigError(f"{where}.choices lists {_fmt(c)} twice.")
        return Choice(tuple(choices))
    unknown = [k for k in keys if k not in _RANGE_KEYS]
    if unknown:
        raise ConfigError(
            f"{where}: unknown distribution key {unknown[0]!r}; valid keys are `choices` or "
            f"{list(_RANGE_KEYS)}."
        )
    if numeric is None:
        raise ConfigError(f"{where} takes {{choices: [...]}} only, but got a range {dict(raw)!r}.")
    if "low" not in raw or "high" not in raw:
        raise ConfigError(f"{where}: a range needs both `low` and `high`, but got {dict(raw)!r}.")
    low, high = _number(f"{where}.low", raw["low"]), _number(f"{where}.high", raw["high"])
    step = None if raw.get("step") is None else _number(f"{where}.step", raw["step"])
    log = raw.get("log", False)
    if not isinstance(log, bool):
        raise ConfigError(f"{where}.log must be true or false, but got {log!r}.")
    if low > high:
        raise ConfigError(f"{where}: `low <= high` must hold, but got low={low}, high={high}.")
    if step is not None and step <= 0:
        raise ConfigError(f"{where}: `step > 0` must hold, but got step={step}.")
    if log and low <= 0:
        raise ConfigError(f"{where}: a log range needs `low > 0`, but got low={low}.")
    if numeric == "float":
        if log and step is not None:
            raise ConfigError(f"{where}: `log` and `step` cannot be combined.")
        return FloatRange(float(low), float(high), None if step is None else float(step), log)
    for name, v in (("low", low), ("high", high), ("step", step)):
        if v is not None and not (isinstance(v, int) or float(v).is_integer()):
            raise ConfigError(f"{where}.{name} must be an integer, but got {v!r}.")
    ilow, ihigh, istep = int(low), int(high), 1 if step is None else int(step)
    if log and istep != 1:
        raise ConfigError(f"{where}: `log` and `step` cannot be combined.")
    if (ihigh - ilow) % istep:
        raise ConfigError(
            f"{where}: `high - low` must be a multiple of `step`, but got low={ilow}, "
            f"high={ihigh}, step={istep}."
        )
    return IntRange(ilow, ihigh, istep, log)
