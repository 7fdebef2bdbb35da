"""The knobs a search space may search, and the order ``SearchSpace.suggest`` draws them in.

Every ``arch`` key of a space is an ``ArchConfig`` key or one of the DERIVED width knobs, which
exist so that divisibility holds by construction:

- ``heads_per_group``: heads = groups x heads_per_group (so groups always divides heads);
- ``head_dim``: d_model = heads x head_dim (so heads, hence groups, divides d_model);
- ``ffn_ratio``: d_ff = ffn_ratio x d_model (so groups divides d_ff).
"""

from __future__ import annotations

import functools
import types
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from nas.knobs import KNOBS, Knob, by_name
from search_spaces._distributions import Numeric, same_value

__all__ = [
    "ARCH_ORDER",
    "BOOL_KNOBS",
    "CHOICE_KNOBS",
    "DEPTH_KNOBS",
    "DERIVED",
    "GROUP_FLAGS",
    "INT_KNOBS",
    "SHARINGS",
    "STACK_DEPTH_KEYS",
    "TABLE_DRAWN",
    "TRAIN_FIXED",
    "accepts",
    "arch_keys",
    "drawn_knobs",
    "numeric_kind",
    "registered",
    "train_fields",
]

DEPTH_KNOBS = ("encoder_layers", "decoder_layers", "language_layers", "vision_layers",
               "cross_layers")
#: Stack name (as in ``layer_sharing``) -> the config key holding its depth.
STACK_DEPTH_KEYS = {"encoder": "encoder_layers", "decoder": "decoder_layers",
                    "language": "language_layers", "vision": "vision_layers",
                    "cross": "cross_layers"}
GROUP_FLAGS = ("group_attention", "group_ffn", "group_merge", "group_intermediate")
DERIVED = ("heads_per_group", "head_dim", "ffn_ratio")
# From the knob table: flags take choices of true/false, integers ranges or choices (radix_base
# takes choices only: it may be null), choice knobs (attention sharing...) their choices.
BOOL_KNOBS = tuple(k.name for k in KNOBS if k.kind == "bool")
INT_KNOBS = (*(k.name for k in KNOBS if k.kind == "int" and k.name != "radix_base"),
             "heads_per_group", "head_dim", "ffn_ratio")
CHOICE_KNOBS: dict[str, tuple[str, ...]] = {k.name: k.choices for k in KNOBS
                                            if k.kind == "choice"}
SHARINGS = by_name("attention_sharing").choices

# Drawn by hand in ``SearchSpace.suggest``: the depths, then groups before the widths they must
# divide (the derived widths make the divisibility hold by construction).
_BY_HAND = (*DEPTH_KNOBS, "depths",
            "groups", "heads", "heads_per_group", "d_model", "head_dim", "d_ff", "ffn_ratio")
# The first knobs drawn from the table, in the order stored studies drew them: flags once groups
# is known, attention sharing before the Q/K multiplier its condition reads.
_FIRST_DRAWN = (*GROUP_FLAGS, "weight_sharing", "attention_sharing", "qk_multiplier",
                "radix_base", "layer_sharing", "patch_size", "window_size")

#: The order of ``trial.suggest_*`` calls: the knobs drawn by hand, then the table's searchable
#: knobs (a knob after those its ``Knob.condition`` reads), knobs added since in table order.
ARCH_ORDER = (*_BY_HAND, *_FIRST_DRAWN, *(
    k.name for k in KNOBS
    if k.kind in ("int", "bool", "choice") and k.name not in (*_BY_HAND, *_FIRST_DRAWN)))
#: The knobs ``SearchSpace.suggest`` and ``params_for`` handle generically from their table row
#: (``layer_sharing``'s row marks where the stacks' patterns are drawn).
TABLE_DRAWN: tuple[Knob, ...] = tuple(by_name(key) for key in ARCH_ORDER if key not in _BY_HAND)



def registered(key: str | None = None) -> tuple[Knob, ...]:
    """The knobs plugins registered (``nas.registry.register_knob``), in order; with ``key``,
    that knob's row alone (empty when no plugin registered it)."""
    from nas.registry import plugin_knobs

    rows = plugin_knobs()
    return rows if key is None else tuple(k for k in rows if k.name == key)


def arch_keys() -> tuple[str, ...]:
    """Every ``arch`` key a space may search: :data:`ARCH_ORDER`, then the plugins' knobs."""
    return (*ARCH_ORDER, *(k.name for k in registered()))


def drawn_knobs() -> tuple[Knob, ...]:
    """The knobs ``suggest`` and ``params_for`` handle from their rows, in drawing order: the
    table's (:data:`TABLE_DRAWN`), then the plugins' (drawn last, so a space made before a
    plugin existed draws what it drew)."""
    return (*TABLE_DRAWN, *registered())


#: TrainConfig fields a space may not search: the study owns them (fidelity, seed, resources).
TRAIN_FIXED = ("epochs", "seed", "device", "amp", "max_steps_per_epoch", "eval_batch_size",
               "max_decode_len", "loader_workers")


@functools.cache
def train_fields() -> dict[str, tuple[Any, Any]]:
    """Searchable ``TrainConfig`` field -> (type, default).

    Imported lazily: the trainer pulls in torch and the task data, which reading or printing a
    space does not need.
    """
    import dataclasses

    from trainers.config import TrainConfig

    hints = get_type_hints(TrainConfig)
    return {
        f.name: (hints[f.name], f.default)
        for f in dataclasses.fields(TrainConfig) if f.name not in TRAIN_FIXED
    }


def _members(tp: Any) -> tuple[Any, ...]:
    origin = get_origin(tp)
    if origin is Union or origin is types.UnionType:
        return get_args(tp)
    return (tp,)


def numeric_kind(tp: Any) -> Numeric:
    """Whether a field of type ``tp`` takes an int range, a float range, or choices only."""
    members = _members(tp)
    if float in members:
        return "float"
    if int in members:
        return "int"
    return None


def accepts(tp: Any, value: Any) -> bool:
    """Whether ``value`` has the type ``tp`` (``int``, ``float | None``, ``Literal[...]``...)."""
    for member in _members(tp):
        if get_origin(member) is Literal:
            if any(same_value(value, a) for a in get_args(member)):
                return True
        elif member is type(None):
            if value is None:
                return True
        elif member is bool:
            if isinstance(value, bool):
                return True
        elif member is int:
            if isinstance(value, int) and not isinstance(value, bool):
                return True
        elif member is float:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return True
        elif isinstance(member, type) and isinstance(value, member):
            return True
    return False
