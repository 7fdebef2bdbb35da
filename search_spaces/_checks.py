"""Reading and validating the ``arch`` and ``train`` sections of a search space.

Validation is static: it proves, before any trial runs, that every combination the space can
draw is a valid ``ArchConfig`` (e.g. every listed ``groups`` choice divides every width the space
can produce, and every width stays within ``nas.config.LIMITS``). The ends of every range are
checked against those limits first, so ``{low: 1, high: 1e9}`` is refused without walking the
values in between. Messages name the offending key or choice; the caller prefixes the space's
name.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nas.config import LIMITS, ArchConfig, groups_split_heads, stack_depths
from nas.errors import ConfigError
from nas.knobs import FAMILY_NAMES, KNOBS
from nas.registry import get_family
from nas.sharing import parse_pattern
from search_spaces._distributions import (
    Choice,
    Distribution,
    Numeric,
    parse_distribution,
)
from search_spaces._knobs import (
    BOOL_KNOBS,
    CHOICE_KNOBS,
    DERIVED,
    GROUP_FLAGS,
    INT_KNOBS,
    STACK_DEPTH_KEYS,
    TRAIN_FIXED,
    accepts,
    arch_keys,
    numeric_kind,
    registered,
    train_fields,
)
from search_spaces._schemes import SCHEMES

__all__ = ["check_arch", "depth_label", "ends", "parse_arch", "parse_train"]

_MAX_WIDTH_COMBOS = 1_000_000
# The limit of each integer knob: a config key's own, a derived knob's that of the width it
# multiplies into (the product is checked for every draw by _check_widths).
_KNOB_LIMITS: dict[str, int] = {
    **{key: LIMITS[key] for key in INT_KNOBS if key in LIMITS},
    "radix_base": LIMITS["radix_base"],
    "heads_per_group": LIMITS["heads"],
    "head_dim": LIMITS["d_model"],
    "ffn_ratio": LIMITS["d_ff"],
}


def ends(dist: Distribution) -> Sequence[Any]:
    """The values that bound ``dist``: every choice, or a range's low and high."""
    return dist.values() if isinstance(dist, Choice) else (dist.low, dist.high)


def depth_label(depths: Iterable[int]) -> str:
    """The categorical value standing for a swin ``depths`` list (Optuna wants scalars)."""
    return ",".join(str(d) for d in depths)


def parse_arch(raw: Any, base: ArchConfig) -> dict[str, Distribution]:
    """Parse ``arch``; ``layer_sharing`` per stack becomes keys ``layer_sharing.<stack>``."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"`arch` must be a mapping from knob to distribution, but got {raw!r}.")
    out: dict[str, Distribution] = {}
    for key, spec in raw.items():
        if key == "family":
            raise ConfigError("arch.family cannot be searched: the family is fixed by `base`.")
        if key not in arch_keys():
            raise ConfigError(
                f"Unknown arch knob {key!r}; valid knobs are {sorted(arch_keys())} "
                f"({', '.join(DERIVED)} are derived widths)."
            )
        where = f"arch.{key}"
        if key == "layer_sharing" and isinstance(spec, Mapping) and "choices" not in spec:
            stacks = list(stack_depths(base.family, base.to_dict()))
            for stack, sub in spec.items():
                if stack not in stacks:
                    raise ConfigError(
                        f"{where} names stack {stack!r}, but family {base.family!r} has stacks "
                        f"{stacks}."
                    )
                out[f"layer_sharing.{stack}"] = parse_distribution(f"{where}.{stack}", sub, None)
        elif key == "depths" and isinstance(spec, Mapping) and "choices" in spec:
            choices = spec["choices"]
            if not isinstance(choices, list) or not all(
                isinstance(c, list) and all(type(d) is int for d in c) for c in choices
            ):
                raise ConfigError(f"{where}.choices must be a list of lists of integers.")
            labels = [depth_label(c) for c in choices]
            out[key] = parse_distribution(where, {"choices": labels}, None)
        else:
            numeric: Numeric = "int" if key in INT_KNOBS or key == "radix_base" or any(
                k.kind == "int" for k in registered(key)) else None
            out[key] = parse_distribution(where, spec, numeric)
    return out


def parse_train(raw: Any) -> dict[str, Distribution]:
    """Parse ``train``: every key a searchable ``TrainConfig`` field, every value of its type."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"`train` must be a mapping from key to distribution, but got {raw!r}.")
    fields = train_fields() if raw else {}
    out: dict[str, Distribution] = {}
    for key, spec in raw.items():
        if key in TRAIN_FIXED:
            raise ConfigError(
                f"train.{key} cannot be searched: the study sets it (fidelity, seed, resources)."
            )
        if key not in fields:
            raise ConfigError(f"Unknown train key {key!r}; valid keys are {sorted(fields)}.")
        tp, _ = fields[key]
        dist = parse_distribution(f"train.{key}", spec, numeric_kind(tp))
        for value in ends(dist):
            if not accepts(tp, value):
                kind = str(tp).replace("typing.", "")
                raise ConfigError(f"train.{key} cannot take {value!r}: it must be {kind}.")
        out[key] = dist
    if out:
        from trainers.config import TrainConfig  # loaded by train_fields() already

        for key, dist in out.items():
            for value in ends(dist):  # the trainer's limits are ranges: the ends suffice
                overrides: dict[str, Any] = {key: value}
                try:
                    TrainConfig(**overrides)  # the trainer's own rules (lr > 0, ...)
                except ConfigError as exc:
                    raise ConfigError(f"train.{key}: {exc}") from None
    return out


def _values(arch: Mapping[str, Distribution], key: str, default: Any) -> Sequence[Any]:
    return arch[key].values() if key in arch else (default,)


def _check_limits(arch: Mapping[str, Distribution]) -> None:
    """Every integer knob's choices, or its range's ends, within ``1..limit``: checked before
    anything walks a range's values."""
    plugin = {k.name: k for k in registered() if k.kind == "int"}
    for key, dist in arch.items():
        limit = _KNOB_LIMITS.get(key) or (plugin[key].high if key in plugin else None)
        if limit is None:
            continue
        low = 2 if key == "radix_base" else plugin[key].minimum if key in plugin else 1
        for value in ends(dist):
            if value is None and key == "radix_base":
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"arch.{key} values must be integers, but got {value!r}.")
            if not low <= value <= limit:
                raise ConfigError(f"arch.{key}: `{low} <= {key} <= {limit}` must hold for every "
                                  f"value the space can draw, but it can draw {value}.")


def _check_types(base: ArchConfig, arch: Mapping[str, Distribution]) -> None:
    for key, dist in arch.items():
        where = f"arch.{key}"
        if key.partition(".")[0] not in arch_keys():
            raise ConfigError(f"Unknown arch knob {key!r}; valid knobs are {sorted(arch_keys())}.")
        row = next(iter(registered(key)), None)  # a plugin's knob: its row's kind and choices
        choices = CHOICE_KNOBS.get(key) or (row.choices if row is not None else ())
        for value in dist.values():
            if (key in INT_KNOBS or (row is not None and row.kind == "int")) and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise ConfigError(f"{where} values must be integers >= 1, but got {value!r}.")
            if (key in BOOL_KNOBS or (row is not None and row.kind == "bool")) and (
                    not isinstance(value, bool)):
                raise ConfigError(f"{where} choices must be true/false, but got {value!r}.")
            if choices and value not in choices:
                raise ConfigError(f"{where} choices must be in {list(choices)}, got {value!r}.")
            if (key == "attention_sharing" and value == "qv"
                    and get_family(base.family).cross_attention):
                raise ConfigError(
                    f"{where} lists 'qv', but family {base.family!r} has cross-attention and qv "
                    "applies to self-attention only (vit, swin); use none, kv or qk."
                )
            if key == "radix_base" and value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 2
            ):
                raise ConfigError(f"{where} values must be null or integers >= 2, got {value!r}.")
    if "radix_base" in arch and base.family != "ort":
        raise ConfigError(
            f"arch.radix_base applies to family 'ort' only (radix encoding needs a text "
            f"decoder), but the base is {base.family!r}."
        )
    # Keys that only some families have: let the config say which (same message as `nas cost`).
    for key in (k.name for k in KNOBS if k.families != FAMILY_NAMES
                and k.name not in ("radix_base", "layer_sharing")):
        for value in arch[key].values() if key in arch else ():
            if key == "depths":
                value = [int(d) for d in str(value).split(",")]
            try:
                base.replace(**{key: value, "layer_sharing": None})
            except ConfigError as exc:
                raise ConfigError(f"arch.{key}={value!r}: {exc}") from None


def _check_exclusive(arch: Mapping[str, Distribution]) -> None:
    for direct, derived in (("heads", "heads_per_group"), ("d_model", "head_dim"),
                            ("d_ff", "ffn_ratio")):
        if direct in arch and derived in arch:
            raise ConfigError(
                f"arch.{direct} and arch.{derived} cannot both be searched: {derived} "
                f"determines {direct}."
            )


def _check_widths(base: ArchConfig, arch: Mapping[str, Distribution]) -> None:
    """Prove d_model, d_ff and heads divisible by groups (swin: the widths only), d_model by
    heads, for every draw."""
    groups = _values(arch, "groups", base.groups)
    heads_src = _values(arch, "heads_per_group" if "heads_per_group" in arch else "heads",
                        base.heads)
    dm_src = _values(arch, "head_dim" if "head_dim" in arch else "d_model", base.d_model)
    ff_src = _values(arch, "ffn_ratio" if "ffn_ratio" in arch else "d_ff", base.d_ff)
    if len(groups) * len(heads_src) * len(dm_src) * len(ff_src) > _MAX_WIDTH_COMBOS:
        raise ConfigError(
            "the width ranges allow too many combinations to verify; use `choices` or a `step` "
            "for groups, heads, d_model and d_ff."
        )
    # swin: stage i is 2**i times as wide (and has 2**i times the heads) as the first
    stages = [len(str(c).split(",")) for c in _values(arch, "depths", depth_label(base.depths))
              ] if base.depths is not None else [1]
    scale = 2 ** (max(stages) - 1)
    good = []
    first_bad: tuple[int, str] | None = None
    for g in groups:
        failure = None
        for hs, ds, fs in itertools.product(heads_src, dm_src, ff_src):
            h = g * hs if "heads_per_group" in arch else hs
            d = h * ds if "head_dim" in arch else ds
            ff = d * fs if "ffn_ratio" in arch else fs
            for key, value in (("heads", h), ("d_model", d), ("d_ff", ff)):
                if value * scale > LIMITS[key]:
                    widest = f" in its last stage ({max(stages)} stages)" if scale > 1 else ""
                    raise ConfigError(
                        f"the space can draw {key}={value * scale}{widest} (groups={g}, "
                        f"heads={h}, d_model={d}), but `{key} <= {LIMITS[key]}` must hold."
                    )
            for rule, ok, vals in (
                ("d_model % heads == 0", d % h == 0, f"d_model={d}, heads={h}"),
                ("heads % groups == 0", h % g == 0 or not groups_split_heads(base.family),
                 f"heads={h}, groups={g}"),
                ("d_model % groups == 0", d % g == 0, f"d_model={d}, groups={g}"),
                ("d_ff % groups == 0", ff % g == 0, f"d_ff={ff}, groups={g}"),
            ):
                if not ok:
                    failure = f"`{rule}` fails with {vals}"
                    break
            if failure:
                break
        if failure is None:
            good.append(g)
        elif first_bad is None:
            first_bad = (g, failure)
    if first_bad is None:
        return
    g, failure = first_bad
    hints = [f"search `{derived}` instead of `{direct}`" for direct, derived in
             (("heads", "heads_per_group"), ("d_model", "head_dim"), ("d_ff", "ffn_ratio"))
             if direct in arch]
    hint = f"; {' and '.join(hints)} so that it holds by construction" if hints else ""
    if "groups" in arch and good:
        raise ConfigError(f"arch.groups choice {g} is impossible: {failure} (choices that always "
                          f"fit: {good}){hint}.")
    raise ConfigError(f"{failure}{hint}.")


def _check_sharing(base: ArchConfig, arch: Mapping[str, Distribution]) -> None:
    keys = [k for k in arch if k.startswith("layer_sharing")]
    if keys and base.family == "swin":
        raise ConfigError("arch.layer_sharing does not apply to family 'swin' (its blocks "
                          "alternate window shifts, so one module cannot serve two depths).")
    if "layer_sharing" in arch and len(keys) > 1:
        raise ConfigError("arch.layer_sharing is given both for all stacks and per stack.")
    stacks = stack_depths(base.family, base.to_dict())
    for stack, depth in stacks.items():
        depth_key = STACK_DEPTH_KEYS[stack]
        searched = next((k for k in (f"layer_sharing.{stack}", "layer_sharing") if k in arch),
                        None)
        if searched is None:
            if depth_key in arch and base.sharing_pattern(stack) != tuple(range(depth)):
                raise ConfigError(
                    f"arch.{depth_key} is searched, but the base shares the {stack} stack's "
                    f"layers with a fixed pattern; search arch.layer_sharing with schemes "
                    f"({', '.join(SCHEMES)})."
                )
            continue
        dist = arch[searched]
        for choice in dist.values():
            if not isinstance(choice, str):
                raise ConfigError(
                    f"arch.{searched} choices must be scheme names ({', '.join(SCHEMES)}) or "
                    f"pattern strings such as '(0x3,1x3)', but got {choice!r}."
                )
            if choice in SCHEMES:
                continue
            length = len(parse_pattern(choice))
            if depth_key in arch:
                raise ConfigError(
                    f"arch.{searched} lists the literal pattern {choice!r}, but arch.{depth_key} "
                    f"is searched; use a scheme ({', '.join(SCHEMES)}) valid for any depth."
                )
            if length != depth:
                raise ConfigError(
                    f"arch.{searched}: pattern {choice!r} has length {length}, but the {stack} "
                    f"stack has {depth} layers."
                )


def _check_dead_knobs(base: ArchConfig, arch: Mapping[str, Distribution]) -> None:
    flags = [k for k in (*GROUP_FLAGS, "weight_sharing") if k in arch]
    if flags and max(_values(arch, "groups", base.groups)) == 1:
        raise ConfigError(f"arch.{flags[0]} is searched, but groups is always 1, so it would "
                          "never be used; search arch.groups too.")
    sharings = _values(arch, "attention_sharing", base.attention_sharing)
    if "qk_multiplier" in arch and not any(s in ("none", "qk") for s in sharings):
        raise ConfigError("arch.qk_multiplier is searched, but attention_sharing is always "
                          f"{sharings[0]!r}, which fixes it to 1.")


def check_arch(base: ArchConfig, arch: Mapping[str, Distribution]) -> None:
    """Raise ``ConfigError`` unless every draw from ``arch`` over ``base`` is a valid config."""
    _check_limits(arch)
    _check_types(base, arch)
    _check_exclusive(arch)
    _check_widths(base, arch)
    _check_sharing(base, arch)
    _check_dead_knobs(base, arch)
