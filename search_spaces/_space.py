"""``SearchSpace``: the one place that maps Optuna trial parameters to an architecture.

A space fixes a ``base`` config and lists, per knob, the distribution it is searched over.
``suggest`` draws the knobs in a fixed order (see ``_knobs.ARCH_ORDER``) so that invalid regions
cannot be drawn at all: widths are derived from groups, conditional knobs are only suggested when
they matter, layer-sharing schemes are resolved after the depth. ``params_for`` is the inverse,
so known baselines can be enqueued with ``study.enqueue_trial``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from optuna.trial import BaseTrial, FixedTrial

from nas.config import ArchConfig, drop_rate, stack_depths
from nas.errors import ConfigError
from nas.presets import PRESETS, get_preset
from search_spaces._checks import check_arch, depth_label, parse_arch, parse_train
from search_spaces._distributions import Distribution
from search_spaces._knobs import (
    DEPTH_KNOBS,
    TABLE_DRAWN,
    arch_keys,
    drawn_knobs,
    train_fields,
)
from search_spaces._schemes import format_sharing, resolve_sharing

__all__ = ["SearchSpace"]

_TOP_KEYS = ("name", "base", "description", "arch", "train")
_CONDITIONS = {
    **{k.name: k.condition.text for k in TABLE_DRAWN if k.condition is not None},
    "heads_per_group": "heads = groups x heads_per_group",
    "head_dim": "d_model = heads x head_dim",
    "ffn_ratio": "d_ff = ffn_ratio x d_model",
}


def _resolve_base(base: Any) -> ArchConfig:
    if isinstance(base, str):
        if base not in PRESETS:
            raise ConfigError(f"`base` {base!r} is not a preset; presets are {sorted(PRESETS)}.")
        return get_preset(base)
    if isinstance(base, Mapping):
        return ArchConfig.from_dict(base)
    raise ConfigError(f"`base` must be a preset name or a config mapping, but got {base!r}.")


def _sort_key(key: str) -> int:
    knob, order = key.partition(".")[0], arch_keys()
    return order.index(knob) if knob in order else len(order)  # refused later


@dataclass(frozen=True)
class SearchSpace:
    """A search space: fixed ``base`` keys plus a distribution per searched knob.

    Build one with ``SearchSpace.from_dict`` or ``load_space``; the constructor takes parsed
    distributions, with per-stack layer sharing under keys ``layer_sharing.<stack>``.

    Attributes:
        name: the space's name (a shipped space's file stem).
        base: a preset name or an inline config mapping, as given.
        arch: knob -> distribution, in suggestion order.
        train: ``TrainConfig`` key -> distribution.
        description: what the space explores, for people.
        base_config: ``base`` as a validated config.
    """

    name: str
    base: str | Mapping[str, Any]
    arch: Mapping[str, Distribution] = field(default_factory=dict)
    train: Mapping[str, Distribution] = field(default_factory=dict)
    description: str = ""
    base_config: ArchConfig = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            base = _resolve_base(self.base)
            object.__setattr__(self, "base_config", base)
            object.__setattr__(self, "arch", dict(sorted(self.arch.items(),
                                                         key=lambda kv: _sort_key(kv[0]))))
            object.__setattr__(self, "train", dict(self.train))
            check_arch(base, self.arch)
            # Belt and braces: the two corners of the space must build.
            for end in (0, -1):
                self.suggest(FixedTrial(self._corner(end)))
        except ConfigError as exc:
            raise ConfigError(f"Search space {self.name!r}: {exc}") from None

    def __hash__(self) -> int:
        return hash(self.hash)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, name: str | None = None) -> SearchSpace:
        """Build from the YAML mapping; unknown keys are an error.

        ``name`` is the fallback when ``data`` has none (a file's stem, or ``"custom"``).
        """
        label = str(data.get("name") or name or "custom") if isinstance(data, Mapping) else "?"
        try:
            if not isinstance(data, Mapping):
                raise ConfigError(f"a search space must be a mapping, but got {data!r}.")
            unknown = [k for k in data if k not in _TOP_KEYS]
            if unknown:
                raise ConfigError(
                    f"unknown key {unknown[0]!r}; valid keys are {list(_TOP_KEYS)}."
                )
            if "base" not in data:
                raise ConfigError("`base` (a preset name or a config mapping) is required.")
            description = data.get("description") or ""
            if not isinstance(description, str):
                raise ConfigError(f"`description` must be text, but got {description!r}.")
            base = data["base"]
            arch = parse_arch(data.get("arch") or {}, _resolve_base(base))
            train = parse_train(data.get("train") or {})
        except ConfigError as exc:
            raise ConfigError(f"Search space {label!r}: {exc}") from None
        return cls(name=label, base=base if isinstance(base, str) else dict(base), arch=arch,
                   train=train, description=" ".join(description.split()))

    def with_base(self, base: str | Mapping[str, Any]) -> SearchSpace:
        """A copy over a different base (e.g. a CPU-sized preset), validated again."""
        return SearchSpace.from_dict({**self.to_dict(), "base": base})

    def to_dict(self) -> dict[str, Any]:
        """The space in its YAML form (``from_dict(space.to_dict())`` gives it back)."""
        arch: dict[str, Any] = {}
        for key, dist in self.arch.items():
            spec = dist.to_dict()
            if key == "depths":
                spec = {"choices": [[int(d) for d in c.split(",")] for c in spec["choices"]]}
            if key.startswith("layer_sharing."):
                arch.setdefault("layer_sharing", {})[key.partition(".")[2]] = spec
            else:
                arch[key] = spec
        base = self.base if isinstance(self.base, str) else dict(self.base)
        return {"name": self.name, "description": self.description, "base": base, "arch": arch,
                "train": {k: d.to_dict() for k, d in self.train.items()}}

    # ------------------------------------------------------------------ identity, display
    @property
    def family(self) -> str:
        return self.base_config.family

    @property
    def hash(self) -> str:
        """Stable 12-hex-digit sha1 of what the space draws (name and description excluded)."""
        blob = {"base": self.base_config.to_dict(),
                "arch": {k: d.to_dict() for k, d in self.arch.items()},
                "train": {k: d.to_dict() for k, d in self.train.items()}}
        text = json.dumps(blob, sort_keys=True, separators=(",", ":"))
        return hashlib.sha1(text.encode()).hexdigest()[:12]

    def distributions_summary(self) -> dict[str, str]:
        """Parameter name -> human-readable distribution (with its condition, if any)."""
        out: dict[str, str] = {}
        for key, dist in {**self.arch, **self.train}.items():
            condition = _CONDITIONS.get(key)
            out[key] = dist.describe() + (f" ({condition})" if condition else "")
        return out

    # ------------------------------------------------------------------ trial -> config
    def suggest(self, trial: BaseTrial) -> tuple[ArchConfig, dict[str, Any]]:
        """Draw one architecture and its training overrides from ``trial``.

        Every draw is valid by construction; the returned dict holds only the searched
        ``TrainConfig`` keys.
        """
        arch, base = self.arch, self.base_config
        values = base.to_dict()

        def pick(key: str, default: Any) -> Any:
            return arch[key].suggest(trial, key) if key in arch else default

        for key in DEPTH_KNOBS:
            if key in arch:
                values[key] = pick(key, None)
        if "depths" in arch:
            values["depths"] = [int(d) for d in str(pick("depths", None)).split(",")]
        groups = values["groups"] = pick("groups", base.groups)
        # Widths in divisibility order: groups | heads | d_model | d_ff (derived knobs make the
        # chain hold by construction; directly searched widths were proven to fit at load).
        if "heads_per_group" in arch:
            values["heads"] = groups * pick("heads_per_group", None)
        else:
            values["heads"] = pick("heads", base.heads)
        if "head_dim" in arch:
            values["d_model"] = values["heads"] * pick("head_dim", None)
        else:
            values["d_model"] = pick("d_model", base.d_model)
        if "ffn_ratio" in arch:
            values["d_ff"] = values["d_model"] * pick("ffn_ratio", None)
        else:
            values["d_ff"] = pick("d_ff", base.d_ff)

        def get(key: str) -> Any:  # a knob drawn (or fixed) so far
            return values[key] if key in values else base.knob(key)

        # The other knobs from their rows (the table's, then the plugins'): each drawn only where
        # its condition holds.
        for knob in drawn_knobs():
            key = knob.name
            if key == "layer_sharing":
                if self.family != "swin":
                    values[key] = self._suggest_sharing(trial, values)
            elif knob.condition is None or knob.condition.holds(get):
                values[key] = pick(key, base.knob(key))
            else:
                values[key] = knob.condition.inactive
        config = ArchConfig.from_dict(values)
        train = {key: dist.suggest(trial, key) for key, dist in self.train.items()}
        return config, train

    def _suggest_sharing(self, trial: BaseTrial, values: dict[str, Any]) -> dict[str, str] | None:
        stacks = stack_depths(self.family, values)
        joint = (str(self.arch["layer_sharing"].suggest(trial, "layer_sharing"))
                 if "layer_sharing" in self.arch else None)
        out: dict[str, str] = {}
        for stack, depth in stacks.items():
            key = f"layer_sharing.{stack}"
            if key in self.arch:
                pattern = resolve_sharing(str(self.arch[key].suggest(trial, key)), depth)
            elif joint is not None:
                pattern = resolve_sharing(joint, depth)
            else:  # not searched: the base's pattern (its depth is fixed, see _checks)
                pattern = self.base_config.sharing_pattern(stack)
            text = format_sharing(pattern)
            if text is not None:
                out[stack] = text
        return out or None

    # ------------------------------------------------------------------ config -> trial
    def params_for(
        self, config: ArchConfig, train: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """The trial parameters that make ``suggest`` rebuild ``config`` (same ``arch_id``).

        Conditional parameters that ``suggest`` would not ask for are left out. Searched
        training keys missing from ``train`` take ``TrainConfig``'s default (``dropout``: the
        family's own, ``nas.config.drop_rate``), moved into the distribution if it lies outside.

        Raises:
            ConfigError: ``config`` (or ``train``) lies outside the space; the message names the
                key.
        """
        params: dict[str, Any] = {}
        arch, base = self.arch, self.base_config
        if config.family != self.family:
            raise ConfigError(f"`family`={config.family!r} is outside search space {self.name!r}"
                              f", whose family is {self.family!r}.")

        def put(key: str, value: Any) -> None:
            if key not in arch:
                return
            if not arch[key].contains(value):
                raise ConfigError(f"`{key}`={value!r} is outside search space {self.name!r}: "
                                  f"{key} is {arch[key].describe()}.")
            params[key] = value

        def effective(key: str) -> Any:  # the value suggest() conditions on
            return (config if key in arch else base).knob(key)

        for key in DEPTH_KNOBS:
            put(key, getattr(config, key))
        if config.depths is not None:
            put("depths", depth_label(config.depths))
        groups = effective("groups")
        put("groups", groups)
        put("heads_per_group", config.heads // groups)
        put("heads", config.heads)
        put("head_dim", config.head_dim)
        put("d_model", config.d_model)
        if "ffn_ratio" in arch and config.d_ff % config.d_model:
            raise ConfigError(f"`d_ff`={config.d_ff} is outside search space {self.name!r}: it is "
                              f"not a whole multiple of d_model={config.d_model} (ffn_ratio).")
        put("ffn_ratio", config.d_ff // config.d_model)
        put("d_ff", config.d_ff)
        for knob in drawn_knobs():  # what suggest() asks for, where it asks
            if knob.name == "layer_sharing":
                params.update(self._sharing_params(config))
            elif knob.condition is None or knob.condition.holds(effective):
                put(knob.name, config.knob(knob.name))
        params.update(self._train_params(train or {}, config.family))
        self._check_rebuilds(config, params)
        return params

    def _sharing_params(self, config: ArchConfig) -> dict[str, str]:
        out: dict[str, str] = {}
        stacks = config.stacks
        for key, dist in self.arch.items():
            if not key.startswith("layer_sharing"):
                continue
            names = [key.partition(".")[2]] if "." in key else list(stacks)
            match = next((str(c) for c in dist.values() if all(
                resolve_sharing(str(c), stacks[s]) == config.sharing_pattern(s) for s in names)),
                None)
            if match is None:
                got = {s: format_sharing(config.sharing_pattern(s)) for s in names}
                raise ConfigError(f"`layer_sharing`={got} is outside search space {self.name!r}: "
                                  f"{key} is {dist.describe()}.")
            out[key] = match
        return out

    def _train_params(self, train: Mapping[str, Any], family: str) -> dict[str, Any]:
        extra = [k for k in train if k not in self.train]
        if extra:
            raise ConfigError(f"train key {extra[0]!r} is not searched by space {self.name!r}; "
                              f"it searches {sorted(self.train)}.")
        out: dict[str, Any] = {}
        for key, dist in self.train.items():
            if key in train:
                if not dist.contains(train[key]):
                    raise ConfigError(f"train `{key}`={train[key]!r} is outside search space "
                                      f"{self.name!r}: {key} is {dist.describe()}.")
                out[key] = train[key]
            else:  # what the trainer would use: its default (dropout: the family's own)
                default = train_fields()[key][1]
                out[key] = dist.nearest(drop_rate(family, default) if key == "dropout"
                                        else default)
        return out

    def _check_rebuilds(self, config: ArchConfig, params: dict[str, Any]) -> None:
        try:
            rebuilt, _ = self.suggest(FixedTrial(params))
        except (ConfigError, ValueError) as exc:  # e.g. a width the base fixes differently
            raise ConfigError(f"the config is outside search space {self.name!r}: {exc}") from None
        want, got = config.normalized(), rebuilt.normalized()
        for key, value in want.items():
            if value != got.get(key):
                raise ConfigError(
                    f"`{key}`={value!r} is outside search space {self.name!r}, which fixes it "
                    f"to {got.get(key)!r}."
                )

    def _corner(self, end: int) -> dict[str, Any]:
        """Parameters taking every distribution's first (``end=0``) or last (``-1``) value."""
        return {key: dist.values()[end] for key, dist in {**self.arch, **self.train}.items()}

