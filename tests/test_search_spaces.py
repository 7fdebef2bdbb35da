"""Search spaces: loading, validity by construction, the inverse mapping, hashing, bad spaces."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from optuna.samplers import RandomSampler
from optuna.trial import FixedTrial

from nas.config import ArchConfig
from nas.errors import ConfigError, NasError
from nas.presets import get_preset
from search_spaces import SCHEMES, Choice, SearchSpace, list_spaces, load_space
from search_spaces._knobs import GROUP_FLAGS
from search_spaces._schemes import resolve_sharing

optuna.logging.set_verbosity(optuna.logging.WARNING)

SHIPPED = ["acort", "armour_vit", "full", "lw_lxmert", "lw_swin", "lw_transformer", "quickstart"]
BASELINES = [
    ("lw_transformer", "lw-1x"), ("lw_transformer", "lw-3x"), ("lw_transformer", "lw-mini"),
    ("lw_transformer", "mcan-small"), ("acort", "acort-base"), ("acort", "acort-base-al"),
    ("acort", "ort-base"), ("armour_vit", "armour-tiny"), ("armour_vit", "deit-tiny"),
    ("lw_swin", "lw-swin-tiny"), ("lw_swin", "swin-tiny"), ("lw_lxmert", "lw-lxmert-1x"),
    ("lw_lxmert", "lxmert"), ("full", "mcan-small"), ("full", "lw-1x"), ("full", "lw-3x"),
    ("full", "lw-mini"),
]
TINY_MCAN = {"family": "mcan", "d_model": 64, "d_ff": 128, "heads": 8, "encoder_layers": 2,
             "decoder_layers": 2}


def _space(**changes: Any) -> dict[str, Any]:
    return {"name": "t", "base": "mcan-small", "arch": {}, "train": {}, **changes}


def test_shipped_spaces_load() -> None:
    assert list_spaces() == SHIPPED
    for name in SHIPPED:
        space = load_space(name)
        assert space.name == name and space.description
        assert SearchSpace.from_dict(space.to_dict()) == space
        assert set(space.distributions_summary()) == {*space.arch, *space.train}


@pytest.mark.parametrize("name", SHIPPED)
def test_random_trials_are_valid_and_invertible(name: str) -> None:
    space = load_space(name)
    study = optuna.create_study(sampler=RandomSampler(seed=7))
    seen = set()
    for _ in range(200):
        trial = study.ask()
        config, train = space.suggest(trial)  # never raises: invalid regions cannot be drawn
        assert config.family == space.family and set(train) == set(space.train)
        if config.groups == 1:
            assert not set(trial.params) & {*GROUP_FLAGS, "weight_sharing"}
        if config.attention_sharing in ("kv", "qv"):
            assert "qk_multiplier" not in trial.params and config.qk_multiplier == 1
        params = space.params_for(config, train)
        again, train_again = space.suggest(FixedTrial(params))
        assert again.arch_id == config.arch_id and train_again == train
        seen.add(config.arch_id)
        study.tell(trial, 0.0)
    assert len(seen) > 20


def test_derived_widths_hold_by_construction() -> None:
    space = load_space("full")
    study = optuna.create_study(sampler=RandomSampler(seed=1))
    for _ in range(100):
        trial = study.ask()
        config, _ = space.suggest(trial)
        p = trial.params
        assert config.heads == p["groups"] * p["heads_per_group"]
        assert config.d_model == config.heads * p["head_dim"]
        assert config.d_ff == p["ffn_ratio"] * config.d_model
        assert config.stacks == {"encoder": p["encoder_layers"], "decoder": p["decoder_layers"]}
        study.tell(trial, 0.0)


@pytest.mark.parametrize(("space_name", "preset"), BASELINES)
def test_presets_enqueue_into_their_space(space_name: str, preset: str) -> None:
    space, config = load_space(space_name), get_preset(preset)
    study = optuna.create_study(sampler=RandomSampler(seed=0))
    study.enqueue_trial(space.params_for(config))
    rebuilt, _ = space.suggest(study.ask())
    assert rebuilt.arch_id == config.arch_id


@pytest.mark.parametrize(("space_name", "config", "train", "named"), [
    ("lw_transformer", get_preset("acort-base"), None, "`family`='ort'"),
    ("lw_transformer", get_preset("mcan-small").replace(encoder_layers=4), None,
     "`encoder_layers`=4"),
    ("full", get_preset("mcan-small").replace(heads=16), None, "`heads_per_group`=16"),
    ("full", get_preset("mcan-small").replace(d_ff=1536), None, "`ffn_ratio`=3"),
    ("acort", get_preset("ort-base").replace(radix_base=300), None, "`radix_base`=300"),
    ("acort", get_preset("ort-base").replace(layer_sharing="(0,1,2,3,4,4)"), None,
     "layer_sharing"),
    ("lw_transformer", get_preset("lw-1x"), {"lr": 1.0}, "train `lr`=1.0"),
    ("lw_transformer", get_preset("lw-1x"), {"weight_decay": 0.1}, "'weight_decay'"),
])
def test_params_for_outside_the_space(space_name: str, config: ArchConfig,
                                      train: dict[str, Any] | None, named: str) -> None:
    with pytest.raises(ConfigError, match=None) as info:
        load_space(space_name).params_for(config, train)
    assert named in str(info.value) and "\n" not in str(info.value)


def test_params_for_fills_train_defaults() -> None:
    space = load_space("quickstart")  # lr in [1e-3, 5e-3]: TrainConfig's 1e-3 lies inside
    params = space.params_for(space.base_config)
    assert params["lr"] == pytest.approx(1e-3)
    assert "group_attention" not in params  # base has groups == 1: the flags are not asked


def test_hash_is_stable_and_tracks_the_space() -> None:
    space = load_space("lw_transformer")
    assert space.hash == load_space("lw_transformer").hash
    assert len(space.hash) == 12 and int(space.hash, 16) >= 0
    data = space.to_dict()
    assert SearchSpace.from_dict({**data, "description": "other words"}).hash == space.hash
    fewer = {**data, "arch": {**data["arch"], "groups": {"choices": [1, 2, 4]}}}
    assert SearchSpace.from_dict(fewer).hash != space.hash
    assert space.with_base("lw-1x").hash != space.hash


def test_with_base_revalidates() -> None:
    small = load_space("acort").with_base("ort-small")
    assert small.base_config.d_model == 256 and small.name == "acort"
    tiny = load_space("lw_transformer").with_base(TINY_MCAN)
    assert tiny.base_config.d_model == 64
    with pytest.raises(ConfigError, match="groups choice 2 is impossible"):
        load_space("quickstart").with_base("deit-tiny")  # 3 heads: only k = 1 or 3 fit


def test_schemes_fit_any_depth() -> None:
    expected = {"none": (0, 1, 2, 3, 4, 5), "full": (0,) * 6, "halves": (0, 0, 0, 1, 1, 1),
                "pairs": (0, 0, 1, 1, 2, 2), "mirror": (0, 1, 2, 2, 1, 0),
                "cycle2": (0, 1, 0, 1, 0, 1)}
    assert {name: resolve_sharing(name, 6) for name in SCHEMES} == expected
    assert resolve_sharing("halves", 5) == (0, 0, 0, 1, 1)
    assert resolve_sharing("mirror", 5) == (0, 1, 2, 1, 0)
    space = SearchSpace.from_dict(_space(arch={
        "encoder_layers": {"low": 1, "high": 7},
        "layer_sharing": {"choices": list(SCHEMES)},
    }))
    study = optuna.create_study(sampler=RandomSampler(seed=3))
    for _ in range(50):
        trial = study.ask()
        config, _ = space.suggest(trial)
        assert len(config.sharing_pattern("encoder")) == trial.params["encoder_layers"]
        assert config.sharing_pattern("decoder") == resolve_sharing(
            trial.params["layer_sharing"], 6)
        study.tell(trial, 0.0)


def test_swin_depths_are_searchable() -> None:
    space = SearchSpace.from_dict({"base": "swin-tiny",
                                   "arch": {"depths": {"choices": [[2, 2, 6, 2], [2, 2, 2, 2]]}}})
    assert space.to_dict()["arch"]["depths"] == {"choices": [[2, 2, 6, 2], [2, 2, 2, 2]]}
    config, _ = space.suggest(FixedTrial({"depths": "2,2,2,2"}))
    assert config.depths == (2, 2, 2, 2)
    assert space.params_for(get_preset("swin-tiny")) == {"depths": "2,2,6,2"}


def test_load_space_from_files_and_mappings(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"base": "deit-tiny", "arch": {"groups": {"choices": [1, 3]}}}))
    assert load_space(path).name == "mine"
    assert load_space(str(path)).arch == load_space({"base": "deit-tiny", "arch": {
        "groups": {"choices": [1, 3]}}}).arch
    with pytest.raises(NasError, match="does not exist"):
        load_space(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match=r"Unknown search space 'nope'.*lw_transformer"):
        load_space("nope")


@pytest.mark.parametrize(("changes", "named"), [
    ({"arhc": {}}, "unknown key 'arhc'"),
    ({"base": "mcan-large"}, "'mcan-large' is not a preset"),
    ({"arch": {"grups": {"choices": [1, 2]}}}, "Unknown arch knob 'grups'"),
    ({"arch": {"family": {"choices": ["mcan", "ort"]}}}, "arch.family cannot be searched"),
    ({"arch": {"groups": {"choices": [1, 2, 3]}}}, "groups choice 3 is impossible"),
    ({"arch": {"attention_sharing": {"choices": ["none", "qv"]}}}, "lists 'qv'"),
    ({"base": "deit-tiny", "arch": {"radix_base": {"choices": [None, 256]}}},
     "radix_base applies to family 'ort' only"),
    ({"base": "ort-base", "arch": {"layer_sharing": {"encoder": {"choices": ["(0x3,1x2)"]}}}},
     "has length 5"),
    ({"arch": {"encoder_layers": {"choices": [2, 4]},
               "layer_sharing": {"choices": ["none", "(0x6)"]}}}, "literal pattern '(0x6)'"),
    ({"base": "swin-tiny", "arch": {"layer_sharing": {"choices": ["none", "full"]}}},
     "does not apply to family 'swin'"),
    ({"base": "ort-base", "arch": {"layer_sharing": {"middle": {"choices": ["none"]}}}},
     "stack 'middle'"),
    ({"arch": {"layer_sharing": {"choices": ["none", "zigzag"]}}}, "item 'zigzag'"),
    ({"arch": {"groups": {"low": 4, "high": 1}}}, "`low <= high`"),
    ({"arch": {"groups": {"choices": []}}}, "non-empty list"),
    ({"arch": {"groups": {"low": 1}}}, "needs both `low` and `high`"),
    ({"arch": {"groups": {"low": 1, "high": 4, "stepp": 1}}}, "unknown distribution key 'stepp'"),
    ({"arch": {"groups": {"choices": [1, 2], "low": 1}}}, "cannot be combined with 'low'"),
    ({"arch": {"groups": {"low": 1, "high": 8, "step": 3}}}, "multiple of `step`"),
    ({"arch": {"groups": {"low": 1.5, "high": 4}}}, "must be an integer"),
    ({"arch": {"groups": {"choices": [1, 1]}}}, "lists 1 twice"),
    ({"arch": {"group_ffn": {"low": 0, "high": 1}}}, "takes {choices: [...]} only"),
    ({"arch": {"groups": 2}}, "must be a distribution"),
    ({"base": "swin-tiny", "arch": {"depths": {"choices": [[2, "x"]]}}}, "lists of integers"),
    ({"arch": {"groups": {"choices": [1, 2]}, "group_ffn": {"choices": [0, 1]}}},
     "must be true/false"),
    ({"arch": {"heads": {"choices": [4]}, "heads_per_group": {"choices": [2]}}},
     "cannot both be searched"),
    ({"arch": {"groups": {"choices": [1, 2]}, "heads": {"choices": [2, 3]}}},
     "search `heads_per_group` instead of `heads`"),
    ({"arch": {"group_ffn": {"choices": [False, True]}}}, "groups is always 1"),
    ({"base": "acort-base", "arch": {"qk_multiplier": {"choices": [1, 2]}}},
     "attention_sharing is always 'kv'"),
    ({"base": "acort-base", "arch": {"encoder_layers": {"choices": [3, 6]}}},
     "the base shares the encoder stack"),
    ({"train": {"lrr": {"low": 1.0e-4, "high": 1.0e-2}}}, "Unknown train key 'lrr'"),
    ({"train": {"epochs": {"choices": [1, 2]}}}, "train.epochs cannot be searched"),
    ({"train": {"lr": {"low": 0.0, "high": 1.0e-2}}}, "`lr > 0`"),
    ({"train": {"lr": {"low": 0.0, "high": 1.0e-2, "log": True}}}, "needs `low > 0`"),
    ({"train": {"optimizer": {"choices": ["adam", "sgd"]}}}, "cannot take 'sgd'"),
    ({"train": {"batch_size": {"low": 8.5, "high": 64}}}, "must be an integer"),
    ({"arch": {"d_model": {"low": 64, "high": "1e9"}}}, "`1 <= d_model <= 8192`"),
    ({"arch": {"decoder_layers": {"choices": [6, 100_000]}}}, "decoder_layers <= 128"),
    ({"arch": {"head_dim": {"low": 8, "high": 8192}}}, "`d_model <= 8192` must hold"),
    ({"arch": {"groups": {"low": 1, "high": float("inf")}}}, "finite"),
    ({"train": {"batch_size": {"low": 8, "high": "1e9"}}}, "`batch_size <= 65536`"),
    ({"train": {"lr": {"choices": [1e-3, float("nan")]}}}, "finite"),
])
def test_bad_spaces_are_one_line_errors(changes: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError) as info:
        SearchSpace.from_dict(_space(**changes))
    message = str(info.value)
    assert message.startswith("Search space 't': ") and "\n" not in message
    assert named in message, message


def test_constructor_validates_too() -> None:
    with pytest.raises(ConfigError, match="Unknown arch knob 'width'"):
        SearchSpace(name="t", base="mcan-small", arch={"width": Choice((1, 2))})


def test_train_ranges_take_the_field_type() -> None:
    space = SearchSpace.from_dict(_space(train={
        "warmup_epochs": {"low": 0, "high": 2},  # a float field: a float range
        "batch_size": {"choices": [32, 64]},
        "optimizer": {"choices": ["adam", "adamw"]},
        "lr": {"low": "1e-4", "high": "1e-2", "log": True},  # YAML reads 1e-4 as a string
    }))
    _, train = space.suggest(FixedTrial({"warmup_epochs": 0.5, "batch_size": 32,
                                         "optimizer": "adam", "lr": 1e-3}))
    assert train == {"warmup_epochs": 0.5, "batch_size": 32, "optimizer": "adam", "lr": 1e-3}
    assert space.distributions_summary()["warmup_epochs"] == "float in [0, 2]"
