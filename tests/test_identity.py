"""Identity survives new knobs: every preset's ``arch_id`` and every shipped space's hash are
pinned to the values they had before the knob table grew rows (issue 25), so studies stored
before an upgrade resume unchanged."""

from __future__ import annotations

import pytest

from nas.presets import PRESETS, get_preset
from search_spaces import list_spaces, load_space

#: ``get_preset(name).arch_id``, computed before ``ffn_activation`` existed.
ARCH_IDS = {
    "mcan-small": "6734da91dc45",
    "lw-1x": "5b887e5cee19",
    "lw-2x": "6b81f07c4dfc",
    "lw-3x": "97b3304347e4",
    "lw-mini": "1d398f1180aa",
    "ort-base": "420357e9999f",
    "ort-small": "5b44e316571c",
    "ort-xsmall": "b50196d9e0c7",
    "ort-base-4": "d676775d56a0",
    "ort-base-2": "01960b38f79e",
    "acort-base": "02bfa6a03e7a",
    "acort-base-al": "f92f3c133b10",
    "acort-small": "bf9df194850f",
    "acort-xsmall": "ae0e25804734",
    "lxmert": "acce94b61e38",
    "lw-lxmert-1x": "ca64bbb604bb",
    "deit-tiny": "042774ff10d6",
    "deit-small": "89329aefd473",
    "deit-base": "b0b079757ece",
    "armour-tiny": "cbc6c7a41ca6",
    "armour-small": "d06a9ab700bd",
    "armour-base": "4161a4843188",
    "swin-tiny": "2c1c0eca97f7",
    "lw-swin-tiny": "4bc760635d63",
    "lw-swin-tiny-k4": "5453a3df5cc1",
}

#: ``load_space(name).hash`` of every shipped space, computed before ``ffn_activation`` existed.
SPACE_HASHES = {
    "acort": "3b37fba064f9",
    "armour_vit": "25ddaf23fd75",
    "full": "4eb1cfc1c26e",
    "lw_lxmert": "a12e99abc248",
    "lw_swin": "9b5d3d5a0e59",
    "lw_transformer": "0e854afe630f",
    "quickstart": "bf892e44c801",
}


def test_every_preset_is_pinned() -> None:
    assert set(ARCH_IDS) == set(PRESETS)


@pytest.mark.parametrize("name", sorted(ARCH_IDS))
def test_a_presets_arch_id_never_changes(name: str) -> None:
    assert get_preset(name).arch_id == ARCH_IDS[name]


def test_every_shipped_space_is_pinned() -> None:
    assert set(SPACE_HASHES) == set(list_spaces())


@pytest.mark.parametrize("name", sorted(SPACE_HASHES))
def test_a_shipped_spaces_hash_never_changes(name: str) -> None:
    assert load_space(name).hash == SPACE_HASHES[name]
