"""The architecture config: one frozen, validated dataclass for every family.

``ArchConfig`` holds every key of the contract (``docs/reference/contract.md``). It validates on
construction with messages that name the value and the rule; ``from_dict`` rejects unknown keys and
fills keys a family needs but the mapping leaves out from that family's base preset; ``arch_id`` is
a stable hash of the normalised config (equal networks, equal id).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from nas import knobs, registry
from nas.errors import ConfigError
from nas.knobs import FAMILY_NAMES, KNOBS
from nas.sharing import canonical_pattern, format_pattern, parse_pattern

__all__ = [
    "FAMILIES",
    "LIMITS",
    "MAX_STAGES",
    "ArchConfig",
    "AttentionSharing",
    "Family",
    "FfnActivation",
    "drop_rate",
    "groups_split_heads",
    "stack_depths",
]

Family = Literal["mcan", "ort", "lxmert", "vit", "swin"]
AttentionSharing = Literal["none", "kv", "qk", "qv"]
FfnActivation = Literal["relu", "gelu", "silu"]
FAMILIES: tuple[str, ...] = get_args(Family)


def drop_rate(family: str, value: float | None = None) -> float:
    """The dropout a run of ``family`` uses: ``value``, or the family's own when it is None
    (``TrainConfig.dropout`` None): its paper's (MCAN, ORT and LXMERT train with 0.1), timm's
    for the vision families (DeiT and Swin use none), a plugin family's ``drop_rate``."""
    return registry.get_family(family).drop_rate if value is None else float(value)


def groups_split_heads(family: str) -> bool:
    """Whether ``family``'s group-wise attention puts whole heads in each group (the LW papers'
    G-MHA: ``heads % groups == 0``). Swin (LW-Swin) groups its projections by channels only, so
    a head may span groups there and only the widths must divide by ``groups``."""
    return registry.get_family(family).heads_in_groups

# Keys that only some families use (``nas.knobs``): a family not listed must leave the key unset.
_FAMILY_KEYS: dict[str, tuple[str, ...]] = {
    k.name: k.families for k in KNOBS
    if k.families != FAMILY_NAMES and k.name != "layer_sharing"  # swin refuses it with a reason
}

#: Upper limits of the size knobs (``nas.knobs``), checked on construction, before anything is
#: allocated; search spaces check every bound they can draw against them.
LIMITS: dict[str, int] = {k.name: k.high for k in KNOBS if k.high is not None}
#: swin: at most this many stages; stage i is ``d_model * 2**i`` wide, and the widest stage must
#: still obey the d_model, d_ff and heads limits.
MAX_STAGES = 8

_INT_KEYS = tuple(k.name for k in KNOBS if k.kind == "int")
_MINIMUM = {k.name: k.minimum for k in KNOBS if k.kind == "int"}
_BOOL_KEYS = tuple(k.name for k in KNOBS if k.kind == "bool")
_CHOICES = {k.name: k.choices for k in KNOBS if k.kind == "choice"}
_GROUP_FLAGS = ("group_attention", "group_ffn", "group_merge", "group_intermediate")

LayerSharing = str | tuple[tuple[str, str], ...] | None


def stack_depths(family: str, values: Mapping[str, Any]) -> dict[str, int]:
    """Depth of each stack of ``family`` (empty for swin, whose stages are not shared)."""
    return {name: int(values[key]) for name, key in registry.get_family(family).stacks.items()}


@dataclass(frozen=True)
class ArchConfig:
    """One architecture: a family and its knobs (see ``knobs.md``).

    Only the top-level model reads this object; blocks receive explicit arguments.
    """

    family: Family  # or a family a plugin registered (``nas.registry``)
    d_model: int
    d_ff: int
    heads: int
    encoder_layers: int | None = None
    decoder_layers: int | None = None
    language_layers: int | None = None
    vision_layers: int | None = None
    cross_layers: int | None = None
    depths: tuple[int, ...] | None = None
    groups: int = 1
    group_attention: bool = False
    group_ffn: bool = False
    weight_sharing: bool = False
    group_merge: bool = False
    group_intermediate: bool = False
    qk_multiplier: int = 1
    layer_sharing: LayerSharing = None
    attention_sharing: AttentionSharing = "none"
    radix_base: int | None = None
    patch_size: int | None = None
    window_size: int | None = None
    ffn_activation: FfnActivation | None = None  # None: the family's (nas.knobs)
    qk_norm: bool = False
    # The knobs plugins registered (``nas.registry.register_knob``): sorted (name, value) pairs,
    # read with ``knob(name)``.
    _extras: tuple[tuple[str, Any], ...] = field(default=(), repr=False)
    _patterns: dict[str, tuple[int, ...]] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )

    # ------------------------------------------------------------------ validation
    def __post_init__(self) -> None:
        if isinstance(self.layer_sharing, Mapping):
            object.__setattr__(
                self, "layer_sharing", tuple(sorted((str(k), v) for k, v in
                                                    self.layer_sharing.items()))
            )
        if isinstance(self.depths, list):
            object.__setattr__(self, "depths", tuple(self.depths))
        if registry.is_family(self.family):  # a key left unset takes its family's default
            for knob in KNOBS:
                if knob.defaults and getattr(self, knob.name) is None:
                    object.__setattr__(self, knob.name, registry.knob_default(knob,
                                                                              self.family))
        self._check_types()
        self._check_extras()
        self._check_family_keys()
        self._check_divisibility()
        self._check_knobs()
        object.__setattr__(self, "_patterns", self._parse_sharing())

    def _check_types(self) -> None:
        registry.get_family(self.family)  # ConfigError naming the families
        for key in _INT_KEYS:
            value = getattr(self, key)
            if value is None and key not in ("d_model", "d_ff", "heads", "groups",
                                             "qk_multiplier"):
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"`{key}` must be an integer, but got {key}={value!r}.")
            if value < _MINIMUM[key]:
                raise ConfigError(f"`{key} >= {_MINIMUM[key]}` must hold, but got {key}={value}.")
            if value > LIMITS[key]:
                raise ConfigError(f"`{key} <= {LIMITS[key]}` must hold, but got {key}={value}.")
        for key in _BOOL_KEYS:
            value = getattr(self, key)
            if not isinstance(value, bool):
                raise ConfigError(f"`{key}` must be true or false, but got {key}={value!r}.")
        for key, choices in _CHOICES.items():
            value = getattr(self, key)
            if not isinstance(value, str) or value not in choices:
                raise ConfigError(f"`{key}` must be one of {list(choices)}, but got {value!r}.")
        if self.depths is not None and (
            not isinstance(self.depths, tuple)
            or not self.depths
            or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in self.depths)
        ):
            raise ConfigError(
                f"`depths` must be a non-empty list of integers >= 1, but got {self.depths!r}."
            )
        if self.depths is not None:
            self._check_stages(self.depths)

    def _check_stages(self, depths: tuple[int, ...]) -> None:
        if len(depths) > MAX_STAGES:
            raise ConfigError(f"`len(depths) <= {MAX_STAGES}` must hold, but got "
                              f"{len(depths)} stages.")
        if sum(depths) > LIMITS["depths"]:
            raise ConfigError(f"`sum(depths) <= {LIMITS['depths']}` must hold, but got "
                              f"depths={list(depths)}.")
        scale = 2 ** (len(depths) - 1)  # the last stage is this many times wider
        for key in ("d_model", "d_ff", "heads"):
            value = getattr(self, key)
            if value * scale > LIMITS[key]:
                raise ConfigError(
                    f"`{key} * 2**(len(depths) - 1) <= {LIMITS[key]}` must hold (the last "
                    f"stage's {key}), but got {key}={value} with {len(depths)} stages."
                )

    def _check_extras(self) -> None:
        given = dict(self._extras)
        rows = {k.name: k for k in registry.plugin_knobs()}
        for key, value in given.items():
            row = rows.get(key)
            if row is None:
                raise ConfigError(f"Unknown architecture key {key!r}; registered knobs are "
                                  f"{sorted(rows)}.")
            if self.family not in row.families and value != registry.knob_default(row,
                                                                                 self.family):
                raise ConfigError(f"`{key}` does not apply to family {self.family!r}; it is a "
                                  f"key of {', '.join(row.families)}.")
            if row.kind == "int" and (isinstance(value, bool) or not isinstance(value, int)
                                      or not row.minimum <= value <= (row.high or value)):
                raise ConfigError(f"`{row.minimum} <= {key} <= {row.high}` must hold for an "
                                  f"integer, but got {key}={value!r}.")
            if row.kind == "bool" and not isinstance(value, bool):
                raise ConfigError(f"`{key}` must be true or false, but got {key}={value!r}.")
            if row.kind == "choice" and value not in row.choices:
                raise ConfigError(f"`{key}` must be one of {list(row.choices)}, but got "
                                  f"{value!r}.")
        filled = {row.name: registry.knob_default(row, self.family) for row in rows.values()
                  if self.family in row.families}
        object.__setattr__(self, "_extras", tuple(sorted({**filled, **given}.items())))

    def knob(self, name: str) -> Any:
        """The value of knob ``name``: a field, or a knob a plugin registered."""
        extras = dict(self._extras)
        if name in extras:
            return extras[name]
        if name.startswith("_") or not hasattr(self, name):
            raise ConfigError(f"Family {self.family!r} has no knob {name!r}.")
        return getattr(self, name)

    def _check_family_keys(self) -> None:
        spec = registry.get_family(self.family)
        for key, families in _FAMILY_KEYS.items():
            if getattr(self, key) is not None and self.family not in families and not spec.uses(
                    key):
                reason = (
                    " (radix encoding needs a text decoder)" if key == "radix_base" else ""
                )
                raise ConfigError(
                    f"`{key}` does not apply to family {self.family!r}{reason}; it is a key of "
                    f"{', '.join(families)}."
                )
        for key in spec.required:
            if getattr(self, key) is None:
                raise ConfigError(f"Family {self.family!r} needs `{key}`, but it is not set.")

    def _check_divisibility(self) -> None:
        d, ff, h, k = self.d_model, self.d_ff, self.heads, self.groups
        if d % h:
            raise ConfigError(f"`d_model % heads == 0` must hold, but got d_model={d}, heads={h}.")
        # swin: stage i is d * 2**i wide, so divisibility carries over to every stage.
        checked = (("d_model", d), ("d_ff", ff)) + ((("heads", h),)
                                                   if groups_split_heads(self.family) else ())
        for name, value in checked:
            if value % k:
                raise ConfigError(
                    f"`{name} % groups == 0` must hold, but got {name}={value}, groups={k}."
                )

    def _check_knobs(self) -> None:
        n, sharing = self.qk_multiplier, self.attention_sharing
        if sharing == "kv" and n != 1:
            raise ConfigError(
                f"attention_sharing='kv' needs qk_multiplier=1 (W_K = W_V must have one width), "
                f"but got qk_multiplier={n}."
            )
        if sharing == "qv" and n != 1:
            raise ConfigError(
                f"attention_sharing='qv' needs qk_multiplier=1 (W_Q = W_V must have one width), "
                f"but got qk_multiplier={n}."
            )
        if sharing == "qv" and registry.get_family(self.family).cross_attention:
            raise ConfigError(
                f"attention_sharing='qv' applies to self-attention only, and family "
                f"{self.family!r} has cross-attention; use 'none', 'kv' or 'qk'."
            )
        if self.layer_sharing is not None and self.family == "swin":
            raise ConfigError(
                "`layer_sharing` is not supported for family 'swin' (its blocks alternate "
                "window shifts, so one module cannot serve two depths); set it to null."
            )

    def _parse_sharing(self) -> dict[str, tuple[int, ...]]:
        stacks = stack_depths(self.family, dataclasses.asdict(self))
        patterns = {name: tuple(range(depth)) for name, depth in stacks.items()}
        if self.layer_sharing is None:
            return patterns
        given: dict[str, Any]
        if isinstance(self.layer_sharing, str):
            given = dict.fromkeys(stacks, self.layer_sharing)
        elif isinstance(self.layer_sharing, tuple):
            given = dict(self.layer_sharing)
        else:
            raise ConfigError(
                "`layer_sharing` must be null, a pattern string or a mapping from stack name to "
                f"pattern, but got {self.layer_sharing!r}."
            )
        for name, text in given.items():
            if name not in stacks:
                raise ConfigError(
                    f"`layer_sharing` names stack {name!r}, but family {self.family!r} has "
                    f"stacks {list(stacks)}."
                )
            if text is None:
                continue
            pattern = parse_pattern(text)
            if len(pattern) != stacks[name]:
                raise ConfigError(
                    f"The {name} sharing pattern {text!r} has length {len(pattern)}, but the "
                    f"{name} stack has {stacks[name]} layers."
                )
            patterns[name] = canonical_pattern(pattern)
        return patterns

    # ------------------------------------------------------------------ derived values
    @property
    def stacks(self) -> dict[str, int]:
        """Executed depth of each stack."""
        return {name: len(p) for name, p in self._patterns.items()}

    def sharing_pattern(self, stack: str) -> tuple[int, ...]:
        """The canonical sharing pattern of ``stack`` (``(0,1,...,L-1)`` when unshared)."""
        return self._patterns[stack]

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    @property
    def attention_groups(self) -> int:
        """Groups of the Q/K/V projections (1 unless G-MHA is on)."""
        return self.groups if self.group_attention else 1

    @property
    def ffn_groups(self) -> int:
        """Groups of the FFN's second projection W2 (1 unless G-FFN is on)."""
        return self.groups if self.group_ffn else 1

    @property
    def merge_groups(self) -> int:
        """Groups of the attention output projection W_O (1 unless G-LML is on)."""
        return self.groups if self.group_merge else 1

    @property
    def intermediate_groups(self) -> int:
        """Groups of the FFN's first projection W1 (1 unless G-IL is on)."""
        return self.groups if self.group_intermediate else 1

    @property
    def shares_group_weights(self) -> bool:
        """Whether WS is in effect (some group-wise layer exists and WS is on)."""
        return self.weight_sharing and self.groups > 1 and any(
            getattr(self, f) for f in _GROUP_FLAGS
        )

    # ------------------------------------------------------------------ (de)serialisation
    def to_dict(self) -> dict[str, Any]:
        """The config as a flat, JSON/YAML-serialisable mapping, in the knob table's order.

        Left out: keys of other families, unset, and knobs added since the first stored
        identities (``Knob.pinned`` false) at their family's default, which ``from_dict`` fills
        back in: a mapping written before such a knob existed reads as the same config.
        """
        out: dict[str, Any] = {}
        for knob in knobs.KNOBS:  # looked up on each call: a test may add a row
            value = getattr(self, knob.name)
            if value is None and knob.name in _FAMILY_KEYS:
                continue
            if not knob.pinned and value == registry.knob_default(knob, self.family):
                continue
            if isinstance(value, tuple) and knob.name == "depths":
                value = list(value)
            if isinstance(value, tuple) and knob.name == "layer_sharing":
                value = dict(value)
            out[knob.name] = value
        rows = {k.name: k for k in registry.plugin_knobs()}
        out.update((name, value) for name, value in self._extras
                   if value != registry.knob_default(rows[name], self.family))
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ArchConfig:
        """Build from a flat mapping; unknown keys are an error.

        Keys the family needs but ``data`` leaves out come from the family's base preset.
        """
        if not isinstance(data, Mapping):
            raise ConfigError(
                f"An architecture config must be a mapping, but got {type(data).__name__}."
            )
        known = {f.name for f in dataclasses.fields(cls) if not f.name.startswith("_")}
        extra = {k.name for k in registry.plugin_knobs()} - known
        unknown = sorted(set(data) - known - extra)
        if unknown:
            raise ConfigError(
                f"Unknown architecture key {unknown[0]!r}; valid keys are "
                f"{sorted(known | extra)}."
            )
        if "family" not in data:
            raise ConfigError(f"The architecture config needs `family`, one of "
                              f"{list(registry.family_names())}.")
        family = data["family"]
        registry.get_family(family)  # ConfigError naming the families
        from nas._preset_table import family_defaults  # the rows, below the presets

        values = {**family_defaults(family), **data}
        extras = tuple(sorted((k, values.pop(k)) for k in extra if k in values))
        return cls(**values, _extras=extras)

    def replace(self, **changes: Any) -> ArchConfig:
        """A copy with some keys changed, validated like any config."""
        return ArchConfig.from_dict({**self.to_dict(), **changes})

    # ------------------------------------------------------------------ identity
    def normalized(self) -> dict[str, Any]:
        """The config with no-op knobs cleared, so that equal networks compare equal.

        A knob whose ``Knob.condition`` does not hold takes its inactive value; ``groups`` is 1
        unless some group-wise layer is on; a knob added since the first stored identities is
        left out at its family's default (``to_dict``), so it changes no ``arch_id`` stored
        before it existed.
        """
        out = self.to_dict()
        for knob in (*knobs.KNOBS, *registry.plugin_knobs()):
            if knob.condition is not None and knob.name in out and not knob.condition.holds(
                    lambda key: out[key] if key in out else self.knob(key)):
                out[knob.name] = knob.condition.inactive
                if not knob.pinned and out[knob.name] == registry.knob_default(knob,
                                                                              self.family):
                    del out[knob.name]
        if not any(out[f] for f in _GROUP_FLAGS):
            out["groups"] = 1
        shared = {
            name: format_pattern(p) for name, p in self._patterns.items()
            if p != tuple(range(len(p)))
        }
        out["layer_sharing"] = shared or None
        return out

    @property
    def arch_id(self) -> str:
        """Stable 12-hex-digit hash of the normalised config."""
        blob = json.dumps(self.normalized(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha1(blob.encode()).hexdigest()[:12]
