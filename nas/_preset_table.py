"""The presets' rows as plain data: no ``ArchConfig`` here, so the config can take a family's
defaults from its base preset without importing the presets module (which builds configs).
``nas.presets`` is the public face of this table."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from nas import registry

__all__ = ["PRESETS", "family_defaults", "preset_notes"]

_LW = {"groups": 2, "group_attention": True, "group_ffn": True, "weight_sharing": True}

# name -> (base preset or None, keys, note)
_TABLE: dict[str, tuple[str | None, dict[str, Any], str]] = {
    "mcan-small": (None, {
        "family": "mcan", "d_model": 512, "d_ff": 2048, "heads": 8,
        "encoder_layers": 6, "decoder_layers": 6,
    }, "MCAN-small encoder-decoder, the Transformer baseline of LW-Transformer"),
    "lw-1x": ("mcan-small", dict(_LW), "LW-Transformer 1x: k=2, G-MHA + G-FFN + WS"),
    "lw-2x": ("lw-1x", {"qk_multiplier": 2}, "LW-Transformer 2x: LW 1x with Q/K expanded 2x "
              "(LW-Transformer Table II)"),
    "lw-3x": ("lw-1x", {"qk_multiplier": 3}, "LW-Transformer 3x: LW 1x with Q/K expanded 3x"),
    "lw-mini": ("lw-1x", {"group_intermediate": True},
                "LW-Transformer mini: LW 1x with G-IL (LW-Transformer Table III, 14.5M)"),
    "ort-base": (None, {
        "family": "ort", "d_model": 512, "d_ff": 2048, "heads": 8,
        "encoder_layers": 6, "decoder_layers": 6,
    }, "Object Relation Transformer captioner"),
    "ort-small": ("ort-base", {"d_model": 256, "d_ff": 1024},
                  "ORT-small: hidden 256, MLP 1,024 (ACORT Table 1, 16.7M)"),
    "ort-xsmall": ("ort-base", {"d_model": 104, "d_ff": 416},
                   "ORT-xsmall: hidden 104, MLP 416 (ACORT Table 1, 4.1M)"),
    "ort-base-4": ("ort-base", {"encoder_layers": 4, "decoder_layers": 4},
                   "ORT-base-4: base width, 4 + 4 layers (ACORT Table 1, 40.7M)"),
    "ort-base-2": ("ort-base", {"encoder_layers": 2, "decoder_layers": 2},
                   "ORT-base-2: base width, 2 + 2 layers (ACORT Table 1, 26.0M)"),
    "acort-base": ("ort-base", {
        "radix_base": 768, "attention_sharing": "kv", "layer_sharing": "(0x3,1x3)",
    }, "ACORT-base: radix v=768, Share-kV, (0x3,1x3) in encoder and decoder"),
    "acort-base-al": ("acort-base", {"layer_sharing": "(0x6)"},
                      "ACORT-base with ALBERT-style full layer sharing (0x6)"),
    "acort-small": ("acort-base", {"d_model": 256, "d_ff": 1024},
                    "ACORT-small: ACORT at hidden 256, MLP 1,024 (ACORT Table 1, 4.2M)"),
    "acort-xsmall": ("acort-small", {"encoder_layers": 2, "decoder_layers": 2,
                                     "layer_sharing": "(0x2)"},
                     "ACORT-xsmall: ACORT-small with (0x2) layer sharing, one layer run twice "
                     "per stack (ACORT Table 1, 2.57M)"),
    "lxmert": (None, {
        "family": "lxmert", "d_model": 768, "d_ff": 3072, "heads": 12,
        "language_layers": 9, "vision_layers": 5, "cross_layers": 5,
    }, "LXMERT: 9 language, 5 object-relationship, 5 cross-modality layers"),
    "lw-lxmert-1x": ("lxmert", dict(_LW), "LW-LXMERT 1x: k=2, G-MHA + G-FFN + WS"),
    "deit-tiny": (None, {
        "family": "vit", "d_model": 192, "d_ff": 768, "heads": 3, "encoder_layers": 12,
        "patch_size": 16,
    }, "DeiT-Ti (timm vit_tiny_patch16_224)"),
    "deit-small": ("deit-tiny", {"d_model": 384, "d_ff": 1536, "heads": 6}, "DeiT-S"),
    "deit-base": ("deit-tiny", {"d_model": 768, "d_ff": 3072, "heads": 12}, "DeiT-B"),
    "armour-tiny": ("deit-tiny", {"attention_sharing": "qv"}, "Armour-Ti: DeiT-Ti with W_V = W_Q"),
    "armour-small": ("deit-small", {"attention_sharing": "qv"},
                     "Armour-S: DeiT-S with W_V = W_Q (Armour Table 3, 20.3M)"),
    "armour-base": ("deit-base", {"attention_sharing": "qv"},
                    "Armour-B: DeiT-B with W_V = W_Q (Armour Table 3, 79.5M)"),
    "swin-tiny": (None, {
        "family": "swin", "d_model": 96, "d_ff": 384, "heads": 3, "depths": [2, 2, 6, 2],
        "patch_size": 4, "window_size": 7,
    }, "Swin-T (timm swin_tiny_patch4_window7_224)"),
    "lw-swin-tiny": ("swin-tiny", {"groups": 2, "group_attention": True, "group_ffn": True},
                     "LW-Swin-T (LW-Transformer Table IX, k = 2): qkv and fc2 grouped by "
                     "channels, no WS; 20.74M (the paper prints 20.0M)"),
    "lw-swin-tiny-k4": ("lw-swin-tiny", {"groups": 4},
                        "LW-Swin-T with k = 4 (LW-Transformer Table IX, 16.9M)"),
}

_FAMILY_BASE = {"mcan": "mcan-small", "ort": "ort-base", "lxmert": "lxmert", "vit": "deit-tiny",
                "swin": "swin-tiny"}


def _resolve(name: str) -> dict[str, Any]:
    base, keys, _ = _TABLE[name]
    return {**(_resolve(base) if base else {}), **keys}


_BUILTIN: dict[str, dict[str, Any]] = {name: _resolve(name) for name in _TABLE}


def _plugin_presets() -> dict[str, tuple[dict[str, Any], str]]:
    """name -> (keys, note) of the presets registered families bring: their base (named after
    the family) and variants."""
    out: dict[str, tuple[dict[str, Any], str]] = {}
    for family in registry.family_names():
        spec = registry.get_family(family)
        if not spec.builtin:
            out[family] = (dict(spec.base), spec.note or f"{family} (plugin family)")
            out.update((n, (dict(v), f"{family} variant")) for n, v in spec.presets.items())
    return out


class _Presets(Mapping[str, dict[str, Any]]):
    """The table above, then the presets of families plugins registered (read live)."""

    def __getitem__(self, name: str) -> dict[str, Any]:
        if name in _BUILTIN:
            return _BUILTIN[name]
        return _plugin_presets()[name][0]

    def __iter__(self) -> Iterator[str]:
        return iter([*_BUILTIN, *_plugin_presets()])

    def __len__(self) -> int:
        return len(_BUILTIN) + len(_plugin_presets())

    def __contains__(self, name: object) -> bool:
        return name in _BUILTIN or name in _plugin_presets()


PRESETS: Mapping[str, dict[str, Any]] = _Presets()


def family_defaults(family: str) -> dict[str, Any]:
    """The keys of ``family``'s base preset (used to fill keys a config leaves out)."""
    if family in _FAMILY_BASE:
        return dict(_BUILTIN[_FAMILY_BASE[family]])
    return dict(registry.get_family(family).base)


def preset_notes() -> list[tuple[str, str, str]]:
    """(name, family, note) of every preset, built-in rows first, in table order."""
    return [(name, PRESETS[name]["family"], note) for name, (_, _, note) in _TABLE.items()] + [
        (name, keys["family"], note) for name, (keys, note) in _plugin_presets().items()]
