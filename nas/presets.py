"""Architecture presets: the papers' networks as rows of data (the rows are in
``nas._preset_table``, below ``nas.config``; here they become configs).

Each preset is a flat mapping in the contract's keys. ``base`` names the row it extends, so a
variant lists only what it changes. Where a paper does not print a size, the row's note says how
it was reconstructed.
"""

from __future__ import annotations

from typing import Any

from nas._preset_table import PRESETS, family_defaults, preset_notes
from nas.config import ArchConfig
from nas.errors import ConfigError

__all__ = ["PRESETS", "PresetInfo", "family_defaults", "get_preset", "list_presets"]

PresetInfo = dict[str, Any]


def get_preset(name: str) -> ArchConfig:
    """The preset ``name`` as a validated config."""
    if name not in PRESETS:
        raise ConfigError(f"Unknown preset {name!r}; presets are {sorted(PRESETS)}.")
    return ArchConfig.from_dict(PRESETS[name])


def list_presets() -> list[PresetInfo]:
    """Name, family and note of every preset, in table order."""
    return [{"name": name, "family": family, "note": note}
            for name, family, note in preset_notes()]
