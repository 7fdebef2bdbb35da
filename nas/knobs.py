"""The knob table: every key of an architecture, declared once.

Each row gives a key's kind, its bounds, the families it applies to, what it means, the paper it
comes from, the value that leaves the Transformer dense (for knobs of the design space) and the
name LW-Transformer's OpenVQA fork or our OpenVQA export writes it under. Everything else reads
this table: ``nas.config`` (types, limits, which family may set which key), the search spaces
(``search_spaces._knobs``: which knobs take ranges, flags or choices), the exports (which knobs
other code bases ignore, the OpenVQA key names) and the README's knob list (:func:`markdown`;
``tests/test_knobs.py`` keeps the README equal to it).

Adding a knob: a row here, a field of ``nas.config.ArchConfig`` of the same name (a test checks
that the two agree), and the layers that implement it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from nas.sharing import MAX_PATTERN_LENGTH

__all__ = ["FAMILY_NAMES", "KNOBS", "Knob", "by_name", "dense_values", "markdown"]

#: The five families, in the order the papers introduce them.
FAMILY_NAMES: tuple[str, ...] = ("mcan", "ort", "lxmert", "vit", "swin")

Kind = Literal["family", "int", "bool", "choice", "pattern", "stages"]


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

    @property
    def is_design_knob(self) -> bool:
        """A knob of the lightweight design space (not a size of the network)."""
        return self.dense is not None or self.name == "layer_sharing"

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


_LW = "LW-Transformer (Luo et al. 2022)"
_ACORT = "ACORT (Tan et al. 2022)"
_SIZE = "the family's paper"

# Generous upper limits, checked on construction before anything is allocated (a typo such as
# d_model 51200000 must be refused, not turned into a network that fills memory): the widest
# stage of any paper-scale network here is 1536 (Swin-L's last; LXMERT and DeiT-B are 768) with
# 48 heads, the deepest stack 32 layers (ViT-H); the limits are five and four times past that.
KNOBS: tuple[Knob, ...] = (
    Knob("family", "family", "which network: MCAN encoder-decoder, object relation captioner, "
         "LXMERT, ViT/DeiT or Swin", "-", choices=FAMILY_NAMES),
    Knob("d_model", "int", "model width (Swin: the first stage's; it doubles each stage)", _SIZE,
         high=8192),
    Knob("d_ff", "int", "FFN hidden width (Swin: the first stage's)", _SIZE, high=32768),
    Knob("heads", "int", "attention heads (Swin: the first stage's)", _SIZE, high=256),
    Knob("encoder_layers", "int", "encoder depth (ViT: its blocks)", _SIZE,
         families=("mcan", "ort", "vit"), high=MAX_PATTERN_LENGTH),
    Knob("decoder_layers", "int", "decoder depth", _SIZE, families=("mcan", "ort"),
         high=MAX_PATTERN_LENGTH),
    Knob("language_layers", "int", "LXMERT's language encoder depth", _SIZE,
         families=("lxmert",), high=MAX_PATTERN_LENGTH),
    Knob("vision_layers", "int", "LXMERT's object-relationship encoder depth", _SIZE,
         families=("lxmert",), high=MAX_PATTERN_LENGTH),
    Knob("cross_layers", "int", "LXMERT's cross-modality encoder depth", _SIZE,
         families=("lxmert",), high=MAX_PATTERN_LENGTH),
    Knob("depths", "stages", "Swin's blocks per stage", _SIZE, families=("swin",),
         high=MAX_PATTERN_LENGTH),
    Knob("groups", "int", "group count k of the group-wise layers (Swin: channel groups of qkv "
         "and fc2)", _LW, high=256, dense=1, openvqa="GROUP"),
    Knob("group_attention", "bool", "G-MHA: Q, K, V projected group-wise, h/k heads per group",
         _LW, dense=False, openvqa="G_MHA"),
    Knob("group_ffn", "bool", "G-FFN: the FFN's second projection W2 group-wise", _LW,
         dense=False, openvqa="G_FFN"),
    Knob("weight_sharing", "bool", "WS: the groups of a group-wise layer share one weight", _LW,
         dense=False, openvqa="WEIGHT_SHARING"),
    Knob("group_merge", "bool", "G-LML: the attention output projection W_O group-wise", _LW,
         dense=False, openvqa="G_LML"),
    Knob("group_intermediate", "bool", "G-IL: the FFN's first projection W1 group-wise", _LW,
         dense=False, openvqa="G_IL"),
    Knob("qk_multiplier", "int", "Q/K expansion n: Q and K projected to n times their width",
         _LW, high=16, dense=1, openvqa="EXPAND"),
    Knob("layer_sharing", "pattern", "cross-layer sharing, e.g. (0x3,1x3): executed depth and "
         "the parameter set of each layer", _ACORT, families=("mcan", "ort", "lxmert", "vit")),
    Knob("attention_sharing", "choice", "attention parameter sharing: kv (W_K = W_V), qk "
         "(W_Q = W_K), qv (W_V = W_Q, Armour; self-attention only)",
         f"{_ACORT}; Armour", choices=("none", "kv", "qk", "qv"), dense="none",
         openvqa="ATT_SHARING"),
    Knob("radix_base", "int", "radix encoding of the vocabulary: words as base-v digits",
         _ACORT, families=("ort",), high=100_000, minimum=2),
    Knob("patch_size", "int", "image patch size", _SIZE, families=("vit", "swin"), high=128),
    Knob("window_size", "int", "Swin's attention window", _SIZE, families=("swin",), high=64),
)

_BY_NAME = {k.name: k for k in KNOBS}


def by_name(name: str) -> Knob:
    """The row of knob ``name`` (KeyError: no such knob)."""
    return _BY_NAME[name]


def dense_values() -> dict[str, Any]:
    """Each design-space knob's value in the plain Transformer (``layer_sharing``: none)."""
    return {k.name: k.dense for k in KNOBS if k.is_design_knob}


def markdown() -> str:
    """The README's knob list: one row per knob."""
    rows = ["| key | values | families | meaning | from |", "|---|---|---|---|---|"]
    for k in KNOBS:
        families = "all" if k.families == FAMILY_NAMES else ", ".join(k.families)
        rows.append(f"| `{k.name}` | {k.bounds()} | {families} | {k.meaning} | {k.paper} |")
    return "\n".join(rows) + "\n"

