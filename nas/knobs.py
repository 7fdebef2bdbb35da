"""The knob table: every key of an architecture, declared once.

Each row gives a key's kind, its bounds or choices, the families it applies to, its default
(the value that leaves the Transformer dense for knobs of the design space, or one value per
family), where it acts (``attention``, ``ffn``, ``stack``, ``embedding``) and the keyword
argument of the blocks it sets, the condition under which it matters, what it means, the paper
it comes from and the name LW-Transformer's OpenVQA fork or our OpenVQA export writes it under.
Everything else reads this table: ``nas.config`` (types, limits, choices, family defaults,
which family may set which key, the identity), ``nas.models.base.block_knobs`` (the blocks'
keyword arguments), the search spaces (``search_spaces._knobs``: which knobs take ranges, flags
or choices, the order and conditions of ``suggest`` and ``params_for``), the exports (which
knobs other code bases ignore, the OpenVQA key names) and the README's knob lists (rendered by
``docs/_generate.py``, above the packages; ``tests/test_knobs.py`` keeps the README equal).

Adding a knob: a row in ``_LATER``, a field of ``nas.config.ArchConfig`` of the same name
defaulting to None (a test checks that the two agree), and the block argument that implements
it. Hand-written code remains only for derived widths, depths and sharing patterns. A later
knob at its family's default stays out of ``arch_id`` and the search-space hashes, so studies
stored before it existed resume unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

from nas.sharing import MAX_PATTERN_LENGTH

__all__ = [
    "FAMILY_NAMES",
    "KNOBS",
    "Condition",
    "Knob",
    "Site",
    "by_name",
    "dense_values",
    "per_family",
]

#: The five families, in the order the papers introduce them.
FAMILY_NAMES: tuple[str, ...] = ("mcan", "ort", "lxmert", "vit", "swin")

Kind = Literal["family", "int", "bool", "choice", "pattern", "stages"]
#: Where a knob acts: the blocks it sets an argument of (``attention``: ``nas.layers.Attention``;
#: ``ffn``: ``nas.layers.FeedForward``), the stacks (depth, layer sharing), the embeddings and
#: output vocabulary, or the width of the whole network.
Site = Literal["attention", "ffn", "stack", "embedding", "network"]


@dataclass(frozen=True)
class Condition:
    """When a knob matters: ``holds(get)`` reads the other knobs' values through ``get``.

    Where it does not hold, the knob takes ``inactive`` (a search space does not draw it, and
    does not ask for it when it enqueues a config); ``text`` says when it holds, for people.
    """

    text: str
    holds: Callable[[Callable[[str], Any]], bool]
    inactive: Any


@dataclass(frozen=True)
class Knob:
    """One key of an architecture (see the module's docstring)."""

    name: str
    kind: Kind
    meaning: str
    paper: str
    families: tuple[str, ...] = FAMILY_NAMES
    high: int | None = None  # the largest value (``int``; ``stages``: blocks over all stages)
    minimum: int = 1  # ``int``: the smallest value
    choices: tuple[str, ...] = ()  # ``choice``: the values
    dense: Any = None  # a design-space knob: its value in the plain Transformer (else None)
    openvqa: str | None = None  # its key in the OpenVQA export (None: not written there)
    label: str | None = None  # its name in the papers (the README's summary lists these)
    defaults: tuple[tuple[str, Any], ...] = ()  # family -> value where a config leaves it out
    acts_on: tuple[Site, ...] = ()
    block_arg: str | None = None  # the keyword argument of the ``acts_on`` blocks it sets
    reads: str | None = None  # the config attribute passed as ``block_arg`` (None: the knob)
    condition: Condition | None = None
    # Whether its family default enters ``arch_id`` and the space hashes: only for the keys the
    # first stored identities held. A later knob enters them only where a config moves it off
    # its family default, so ids and hashes stored before it existed stay what they were.
    pinned: bool = False

    @property
    def is_design_knob(self) -> bool:
        """A knob of the lightweight design space (not a size of the network)."""
        return self.dense is not None or self.name == "layer_sharing"

    def default_for(self, family: str) -> Any:
        """The value of this knob in ``family`` where a config leaves it out (None: no default,
        the family's base preset gives it or the key stays unset)."""
        return dict(self.defaults).get(family)

    def bounds(self) -> str:
        if self.kind == "int":
            return f"{self.minimum} .. {self.high:,}"
        if self.kind == "stages":
            return f"each >= 1, at most {self.high} blocks in all"
        if self.kind in ("choice", "family"):
            return ", ".join(self.choices)
        if self.kind == "bool":
            return "true, false"
        return f"a pattern per stack, at most {MAX_PATTERN_LENGTH} layers"


def per_family(**values: Any) -> tuple[tuple[str, Any], ...]:
    """``Knob.defaults`` from one keyword per family (every family must be named)."""
    missing = [f for f in FAMILY_NAMES if f not in values]
    if missing or set(values) - set(FAMILY_NAMES):
        raise ValueError(f"per_family needs exactly {list(FAMILY_NAMES)}, but got {list(values)}.")
    return tuple((f, values[f]) for f in FAMILY_NAMES)


_LW = "LW-Transformer (Luo et al. 2022)"
_ACORT = "ACORT (Tan et al. 2022)"
_SIZE = "the family's paper"

# Generous upper limits, checked on construction before anything is allocated (a typo such as
# d_model 51200000 must be refused, not turned into a network that fills memory): the widest
# stage of any paper-scale network here is 1536 (Swin-L's last; LXMERT and DeiT-B are 768) with
# 48 heads, the deepest stack 32 layers (ViT-H); the limits are five and four times past that.
_GROUP_FLAGS = ("group_attention", "group_ffn", "group_merge", "group_intermediate")
_GROUPED = Condition("when groups > 1", lambda get: get("groups") > 1, False)
_SHARED = Condition("when groups > 1 and a group-wise layer is on",
                    lambda get: get("groups") > 1 and any(get(f) for f in _GROUP_FLAGS), False)
_QK = Condition("when attention_sharing is none or qk",
                lambda get: get("attention_sharing") in ("none", "qk"), 1)

# The keys of the first stored identities (``pinned``: their values always enter arch_id).
_FIRST: tuple[Knob, ...] = (
    Knob("family", "family", "which network: MCAN encoder-decoder, object relation captioner, "
         "LXMERT, ViT/DeiT or Swin", "-", choices=FAMILY_NAMES),
    Knob("d_model", "int", "model width (Swin: the first stage's; it doubles each stage)", _SIZE,
         high=8192, acts_on=("network",)),
    Knob("d_ff", "int", "FFN hidden width (Swin: the first stage's)", _SIZE, high=32768,
         acts_on=("ffn",)),
    Knob("heads", "int", "attention heads (Swin: the first stage's)", _SIZE, high=256,
         acts_on=("attention",)),
    Knob("encoder_layers", "int", "encoder depth (ViT: its blocks)", _SIZE,
         families=("mcan", "ort", "vit"), high=MAX_PATTERN_LENGTH, acts_on=("stack",)),
    Knob("decoder_layers", "int", "decoder depth", _SIZE, families=("mcan", "ort"),
         high=MAX_PATTERN_LENGTH, acts_on=("stack",)),
    Knob("language_layers", "int", "LXMERT's language encoder depth", _SIZE,
         families=("lxmert",), high=MAX_PATTERN_LENGTH, acts_on=("stack",)),
    Knob("vision_layers", "int", "LXMERT's object-relationship encoder depth", _SIZE,
         families=("lxmert",), high=MAX_PATTERN_LENGTH, acts_on=("stack",)),
    Knob("cross_layers", "int", "LXMERT's cross-modality encoder depth", _SIZE,
         families=("lxmert",), high=MAX_PATTERN_LENGTH, acts_on=("stack",)),
    Knob("depths", "stages", "Swin's blocks per stage", _SIZE, families=("swin",),
         high=MAX_PATTERN_LENGTH, acts_on=("stack",)),
    Knob("groups", "int", "group count k of the group-wise layers (Swin: channel groups of qkv "
         "and fc2)", _LW, high=256, dense=1, openvqa="GROUP", label="group count k",
         acts_on=("attention", "ffn")),  # through the four flags below
    Knob("group_attention", "bool", "G-MHA: Q, K, V projected group-wise, h/k heads per group",
         _LW, dense=False, openvqa="G_MHA", label="G-MHA", acts_on=("attention",),
         block_arg="groups", reads="attention_groups", condition=_GROUPED),
    Knob("group_ffn", "bool", "G-FFN: the FFN's second projection W2 group-wise", _LW,
         dense=False, openvqa="G_FFN", label="G-FFN", acts_on=("ffn",), block_arg="groups",
         reads="ffn_groups", condition=_GROUPED),
    Knob("weight_sharing", "bool", "WS: the groups of a group-wise layer share one weight", _LW,
         dense=False, openvqa="WEIGHT_SHARING", label="WS", acts_on=("attention", "ffn"),
         block_arg="weight_sharing", condition=_SHARED),
    Knob("group_merge", "bool", "G-LML: the attention output projection W_O group-wise", _LW,
         dense=False, openvqa="G_LML", label="G-LML", acts_on=("attention",),
         block_arg="merge_groups", reads="merge_groups", condition=_GROUPED),
    Knob("group_intermediate", "bool", "G-IL: the FFN's first projection W1 group-wise", _LW,
         dense=False, openvqa="G_IL", label="G-IL", acts_on=("ffn",),
         block_arg="intermediate_groups", reads="intermediate_groups", condition=_GROUPED),
    Knob("qk_multiplier", "int", "Q/K expansion n: Q and K projected to n times their width",
         _LW, high=16, dense=1, openvqa="EXPAND", label="Q/K expansion n",
         acts_on=("attention",), block_arg="qk_multiplier", condition=_QK),
    Knob("layer_sharing", "pattern", "cross-layer sharing, e.g. (0x3,1x3): executed depth and "
         "the parameter set of each layer", _ACORT, families=("mcan", "ort", "lxmert", "vit"),
         label="cross-layer sharing", acts_on=("stack",)),
    Knob("attention_sharing", "choice", "attention parameter sharing: kv (W_K = W_V), qk "
         "(W_Q = W_K), qv (W_V = W_Q, Armour; self-attention only)",
         f"{_ACORT}; Armour", choices=("none", "kv", "qk", "qv"), dense="none",
         openvqa="ATT_SHARING", label="attention sharing", acts_on=("attention",),
         block_arg="sharing"),
    Knob("radix_base", "int", "radix encoding of the vocabulary: words as base-v digits",
         _ACORT, families=("ort",), high=100_000, minimum=2, label="radix encoding",
         acts_on=("embedding",)),
    Knob("patch_size", "int", "image patch size", _SIZE, families=("vit", "swin"), high=128,
         acts_on=("embedding",)),
    Knob("window_size", "int", "Swin's attention window", _SIZE, families=("swin",), high=64,
         acts_on=("attention",)),
)

# Knobs added since: each enters arch_id and the space hashes only off its family default.
_LATER: tuple[Knob, ...] = (
    Knob("ffn_activation", "choice", "the FFN's activation between W1 and W2",
         "ReLU: MCAN, LW-Transformer, ORT, ACORT; GELU: LXMERT (BERT), DeiT, Swin",
         choices=("relu", "gelu", "silu"), label="FFN activation",
         defaults=per_family(mcan="relu", ort="relu", lxmert="gelu", vit="gelu", swin="gelu"),
         acts_on=("ffn",), block_arg="act_layer"),
    Knob("qk_norm", "bool", "QK-norm: LayerNorm on each head's queries and keys before their "
         "dot product (timm's qk_norm)", "ViT-22B (Dehghani et al. 2023); timm", dense=False,
         acts_on=("attention",), block_arg="qk_norm"),
)

KNOBS: tuple[Knob, ...] = (*(replace(k, pinned=True) for k in _FIRST), *_LATER)

_BY_NAME = {k.name: k for k in KNOBS}


def by_name(name: str) -> Knob:
    """The row of knob ``name`` (KeyError: no such knob)."""
    return _BY_NAME[name]


def dense_values() -> dict[str, Any]:
    """Each design-space knob's value in the plain Transformer (``layer_sharing``: none)."""
    return {k.name: k.dense for k in KNOBS if k.is_design_knob}
