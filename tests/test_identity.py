"""Identity survives new knobs: every preset's ``arch_id`` and every shipped space's hash are
pinned to the values they had before the knob table grew rows (issue 25), and a study stored
before a knob existed loads unchanged once the table has it."""

from __future__ import annotations

from pathlib import Path

import pytest
import study_helpers as h

import nas.knobs as knobs
from nas.config import ArchConfig
from nas.knobs import Knob, per_family
from nas.presets import PRESETS, get_preset
from search_spaces import list_spaces, load_space
from studies import StudySpec, create_study, load_existing
from studies.store import Status, TrialKey

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


# ----------------------------------------------------------------------------- a knob is added
def _stored_study(url: str, name: str) -> dict[int, str]:
    """Study ``name`` with three completed trials as the engine stores them: number ->
    arch_id."""
    run = create_study(StudySpec.from_dict(h.study_dict(name)), url, geometry=h.GEOMETRY)
    ids = {}
    for i in range(3):
        trial = run.study.ask()
        config, _ = run.space.suggest(trial)
        for key, value in {TrialKey.ARCH: config.to_dict(), TrialKey.ARCH_ID: config.arch_id,
                           TrialKey.TRAIN: {"epochs": 2, "seed": 0},
                           TrialKey.STATUS: Status.COMPLETED}.items():
            trial.set_user_attr(key, value)
        run.study.tell(trial, [0.5 + 0.1 * i, 1000.0 + i])
        ids[trial.number] = config.arch_id
    run.storage.remove_session()
    run.storage.engine.dispose()
    return ids


def _add_knob(monkeypatch: pytest.MonkeyPatch, *, pinned: bool) -> Knob:
    """A new row in the table, as an upgrade adds one: an FFN bias switch, on by default in
    every family (what every network here has), with the config attribute it names."""
    row = Knob("ffn_bias", "bool", "bias on the FFN's projections", "-", acts_on=("ffn",),
               defaults=per_family(mcan=True, ort=True, lxmert=True, vit=True, swin=True),
               pinned=pinned)
    monkeypatch.setattr(knobs, "KNOBS", (*knobs.KNOBS, row))
    monkeypatch.setattr(knobs, "_BY_NAME", {**knobs._BY_NAME, row.name: row})
    monkeypatch.setattr(ArchConfig, row.name, True, raising=False)
    return row


def test_a_study_stored_before_a_knob_existed_loads_unchanged(tmp_path: Path,
                                                              monkeypatch) -> None:
    url = f"sqlite:///{tmp_path / 'db.db'}"
    ids = _stored_study(url, "before")
    space_hash = load_existing("before", url).space.hash
    _add_knob(monkeypatch, pinned=False)
    run = load_existing("before", url)  # no "stored search space now hashes to" refusal
    assert run.space.hash == space_hash
    stored = {t.number: t.user_attrs for t in run.study.get_trials(deepcopy=False)}
    assert {n: a[TrialKey.ARCH_ID] for n, a in stored.items()} == ids
    for number, attrs in stored.items():  # rebuilt from the stored mapping: the same id
        assert ArchConfig.from_dict(attrs[TrialKey.ARCH]).arch_id == ids[number]
    for name, arch_id in ARCH_IDS.items():
        assert get_preset(name).arch_id == arch_id


def test_the_same_knob_pinned_into_the_identity_would_change_every_id(tmp_path: Path,
                                                                    monkeypatch) -> None:
    """The control: were the new knob's default part of the identity, every stored id would
    change (so the test above does see the new row)."""
    url = f"sqlite:///{tmp_path / 'db.db'}"
    ids = _stored_study(url, "before")
    _add_knob(monkeypatch, pinned=True)
    for trial in h.load(url, "before"):
        assert ArchConfig.from_dict(trial.user_attrs[TrialKey.ARCH]).arch_id != ids[trial.number]
    assert get_preset("mcan-small").arch_id != ARCH_IDS["mcan-small"]
