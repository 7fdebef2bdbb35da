"""The knob table (nas/knobs.py) is the one declaration of each knob: the config, the search
spaces, the exports, the README and the documentation site read it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import get_args

import pytest

import nas.config as config
from docs._generate import README, knob_summary, knob_table, main, present, render, section
from nas.config import ArchConfig
from nas.errors import ConfigError
from nas.knobs import FAMILY_NAMES, KNOBS, by_name, dense_values
from nas.models.base import attention_knobs, ffn_knobs
from nas.presets import family_defaults, get_preset
from search_spaces import _knobs as space_knobs


def test_every_config_field_is_a_row_of_the_table_and_back() -> None:
    fields = [f.name for f in dataclasses.fields(ArchConfig) if not f.name.startswith("_")]
    assert fields == [k.name for k in KNOBS]


def test_the_typed_literals_agree_with_the_table() -> None:
    assert get_args(config.Family) == FAMILY_NAMES == by_name("family").choices
    assert get_args(config.AttentionSharing) == by_name("attention_sharing").choices


@pytest.mark.parametrize("knob", [k for k in KNOBS if k.kind == "int"], ids=lambda k: k.name)
def test_each_integer_knob_is_bounded_by_its_row(knob) -> None:
    family = knob.families[0]
    base = {**family_defaults(family), "family": family}
    if knob.name == "radix_base":
        base["radix_base"] = 768
    assert config.LIMITS[knob.name] == knob.high
    for bad, rule in ((knob.high + 1, f"`{knob.name} <= {knob.high}`"),
                      (knob.minimum - 1, f"`{knob.name} >= {knob.minimum}`")):
        with pytest.raises(ConfigError) as info:
            ArchConfig.from_dict({**base, knob.name: bad})
        assert rule in str(info.value)


@pytest.mark.parametrize("knob", [k for k in KNOBS if k.families != FAMILY_NAMES],
                         ids=lambda k: k.name)
def test_a_knob_is_refused_outside_its_families(knob) -> None:
    outside = next(f for f in FAMILY_NAMES if f not in knob.families)
    value = {"depths": [2, 2], "layer_sharing": "(0,1)"}.get(knob.name, 4)
    with pytest.raises(ConfigError) as info:
        ArchConfig.from_dict({**family_defaults(outside), "family": outside, knob.name: value})
    assert knob.name in str(info.value) and outside in str(info.value)


def test_the_search_spaces_take_their_knob_kinds_from_the_table() -> None:
    assert set(space_knobs.BOOL_KNOBS) == {k.name for k in KNOBS if k.kind == "bool"}
    assert {k.name for k in KNOBS if k.kind == "int"} - {"radix_base"} <= set(
        space_knobs.INT_KNOBS)
    assert by_name("attention_sharing").choices == space_knobs.SHARINGS


def test_the_dense_values_build_the_plain_transformer() -> None:
    dense = dense_values()
    assert set(dense) == {"groups", "group_attention", "group_ffn", "weight_sharing",
                          "group_merge", "group_intermediate", "qk_multiplier",
                          "attention_sharing", "qk_norm", "layer_sharing"}
    plain = ArchConfig.from_dict({**family_defaults("mcan"), "family": "mcan", **dense})
    assert plain == ArchConfig.from_dict({**family_defaults("mcan"), "family": "mcan"})


def test_the_site_lists_the_table() -> None:
    """The architecture reference renders the table when the site is built (docs/_hooks.py)."""
    page = (README.parent / "docs" / "reference" / "architecture.md").read_text()
    assert "knobs" in present(page)
    assert section(render(page), "knobs") == knob_table()
    assert knob_table().count("\n") == len(KNOBS) + 2  # a header, a rule and a row per knob


def test_the_readme_summarises_the_knobs_the_papers_name() -> None:
    assert section(README.read_text(), "knob summary") == knob_summary()
    assert present(README.read_text()) == ["knob summary"]


def test_the_generator_rewrites_a_stale_section_and_check_reports_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    text = README.read_text()
    stale = text.replace(knob_summary(), knob_summary().replace("| `groups` |", "| `k` |"))
    assert stale != text and render(stale) == text
    readme = tmp_path / "README.md"
    readme.write_text(stale)
    monkeypatch.setattr("docs._generate.README", readme)
    assert main(["--check"]) == 1 and readme.read_text() == stale
    assert "stale generated sections ['knob summary']" in capsys.readouterr().err
    assert main([]) == 0 and readme.read_text() == text
    assert main(["--check"]) == 0


@pytest.mark.parametrize("preset", ["mcan-small", "lw-mini", "lw-3x", "acort-base",
                                    "lw-swin-tiny", "armour-tiny"])
def test_the_blocks_take_their_knobs_from_the_table(preset: str) -> None:
    config = get_preset(preset)
    assert attention_knobs(config) == {
        "groups": config.attention_groups, "merge_groups": config.merge_groups,
        "weight_sharing": config.weight_sharing, "qk_multiplier": config.qk_multiplier,
        "sharing": config.attention_sharing, "qk_norm": config.qk_norm}
    ffn = ffn_knobs(config)
    assert {k: ffn[k] for k in ("groups", "intermediate_groups", "weight_sharing")} == {
        "groups": config.ffn_groups, "intermediate_groups": config.intermediate_groups,
        "weight_sharing": config.weight_sharing}


def test_a_knobs_condition_clears_it_in_the_identity() -> None:
    base = {**family_defaults("mcan"), "family": "mcan"}
    dense = ArchConfig.from_dict(base)
    for knob in KNOBS:
        if knob.condition is None or knob.kind != "bool":  # the flags: groups is 1 here
            continue
        config = ArchConfig.from_dict({**base, knob.name: not knob.condition.inactive})
        assert not knob.condition.holds(config.normalized().__getitem__)
        assert config.arch_id == dense.arch_id, knob.name
