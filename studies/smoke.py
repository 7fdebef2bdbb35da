"""The smoke scale of a study (study key ``smoke``): a paper-scale space tried on a laptop.

``smoke: true`` (or ``{width: 64, depth: 2, steps: 10}``, any subset) keeps the study as it is
(space, knobs, objectives, sampler, constraints) but shrinks every architecture a trial draws
before its cost is computed and before it trains:

- width: ``d_model`` (a Swin's first-stage width) becomes the largest multiple of
  lcm(heads, groups) not above ``width`` (at least one such multiple), so every divisibility rule
  of the knobs still holds; ``d_ff`` keeps its ratio to ``d_model``, rounded to a multiple of
  ``groups``. Heads, groups, the group flags, sharing and the radix base are kept.
- depth: every stack (each Swin stage) keeps at most ``depth`` layers; a layer-sharing pattern
  keeps its first ``depth`` entries, so a shared stack stays shared.
- steps: each epoch trains at most ``steps`` batches (``train.max_steps_per_epoch``, or the
  study's own where that is smaller).

What a trial records (``nas.arch``, its cost, its arch id) is the shrunk architecture it trained:
the front of a smoke study says how the knobs trade off at that scale, not at the paper's.

A smoke study's trials on a built-in task also start from that task's :data:`SMOKE_TRAIN`
settings (over its quick defaults, under the study's own ``train``): the short proxy measured
to rank the shrunk architectures closest to longer training.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nas.config import ArchConfig
from nas.errors import ConfigError
from nas.sharing import canonical_pattern, format_pattern, parse_pattern

__all__ = ["SMOKE_TRAIN", "Smoke", "parse_smoke"]

#: Training defaults of a smoke study's trials, per task: over the task's quick defaults
#: (``trainers.config.quick_defaults``), under the study's ``train``. On ``synthetic-vqa`` a smoke
#: trial of the ``lw_transformer`` space (4 epochs of 10 batches) trained this way ranks the
#: shrunk architectures (Kendall's tau against 6 whole epochs) 0.06 below what one more full
#: training reaches on average over five draws (0.11 above it to 0.15 below), where the task's
#: defaults (batches of 64, a half-epoch warm-up, a cosine decay) ranked 0.18-0.31 below it on
#: three (benchmarks/proxy_fidelity.py).
#: Not the task's defaults: over 6 whole epochs (``nas train``) they leave a model ten times
#: smaller within the seeds' spread of the dense one (``benchmarks/proxies.py``: gap 0.045,
#: spread 0.046), where the task's defaults keep them apart.
SMOKE_TRAIN: dict[str, dict[str, Any]] = {
    "synthetic-vqa": {"batch_size": 16, "schedule": "constant", "warmup_epochs": 0.0},
}

_DEPTH_KEYS = ("encoder_layers", "decoder_layers", "language_layers", "vision_layers",
               "cross_layers")
_LIMITS = {"width": (8, 4096), "depth": (1, 64), "steps": (1, 1_000_000)}


@dataclass(frozen=True)
class Smoke:
    """Caps on width, depth and steps per epoch (see the module's docstring)."""

    width: int = 64
    depth: int = 2
    steps: int = 10

    def __post_init__(self) -> None:
        for key, (low, high) in _LIMITS.items():
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"Study key `smoke.{key}` must be an integer, but got "
                                  f"{value!r}.")
            if not low <= value <= high:
                raise ConfigError(f"Study key `smoke.{key}` must lie in [{low}, {high}], but "
                                  f"got {value}.")

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)

    def shrink(self, config: ArchConfig) -> ArchConfig:
        """``config`` within the caps (itself when it already is)."""
        changes: dict[str, Any] = {}
        if config.d_model > self.width:
            unit = math.lcm(config.heads, config.groups)
            d_model = max(unit, self.width // unit * unit)
            step = config.groups
            d_ff = max(step, round(config.d_ff * d_model / config.d_model / step) * step)
            changes.update(d_model=d_model, d_ff=d_ff)
        if config.depths is not None and max(config.depths) > self.depth:
            changes["depths"] = tuple(min(d, self.depth) for d in config.depths)
        patterns: dict[str, str] = {}
        for stack in config.stacks:
            pattern = config.sharing_pattern(stack)
            if len(pattern) > self.depth:
                patterns[stack] = format_pattern(canonical_pattern(pattern[: self.depth]))
        if patterns:
            for key in _DEPTH_KEYS:
                depth = getattr(config, key)
                if depth is not None and depth > self.depth:
                    changes[key] = self.depth
            kept = {s: format_pattern(config.sharing_pattern(s)) for s in config.stacks}
            merged = {**kept, **patterns}
            shared = any(len(set(parse_pattern(p))) < len(parse_pattern(p))
                         for p in merged.values())
            changes["layer_sharing"] = merged if shared else None
        if not changes:
            return config
        data = {**config.to_dict(), **changes}
        try:
            return ArchConfig.from_dict(data)
        except ConfigError as exc:
            raise ConfigError(f"Study key `smoke` cannot shrink {config.arch_id}: {exc}") from None

    def train(self, train: Mapping[str, Any]) -> dict[str, Any]:
        """``train`` with at most ``steps`` batches per epoch."""
        own = train.get("max_steps_per_epoch")
        steps = self.steps if own is None else min(int(own), self.steps)
        return {**train, "max_steps_per_epoch": steps}


def parse_smoke(value: Any) -> Smoke | None:
    """The study key ``smoke``: absent, null or false (none), true (the defaults) or a mapping
    of ``width``, ``depth`` and ``steps``."""
    if value is None or value is False:
        return None
    if value is True:
        return Smoke()
    if not isinstance(value, Mapping):
        raise ConfigError(f"Study key `smoke` must be true, false or a mapping of width, depth "
                          f"and steps, but got {value!r}.")
    unknown = sorted(set(value) - set(_LIMITS))
    if unknown:
        raise ConfigError(f"Unknown key {unknown[0]!r} in study `smoke`; valid keys are "
                          f"{list(_LIMITS)}.")
    return Smoke(**dict(value))
