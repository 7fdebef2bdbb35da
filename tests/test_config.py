"""ArchConfig: validation, (de)serialisation, normalisation and arch_id."""

from __future__ import annotations

import json

import pytest
import yaml

from nas.config import ArchConfig
from nas.errors import ConfigError
from nas.loading import load_arch, parse_overrides
from nas.presets import PRESETS, get_preset
from nas.sharing import canonical_pattern, format_pattern, parse_pattern


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_round_trip_through_yaml_and_json(name: str) -> None:
    config = get_preset(name)
    assert ArchConfig.from_dict(yaml.safe_load(yaml.safe_dump(config.to_dict()))) == config
    assert ArchConfig.from_dict(json.loads(json.dumps(config.to_dict()))).arch_id == config.arch_id


def test_arch_ids_of_presets_are_distinct() -> None:
    ids = {get_preset(n).arch_id for n in PRESETS}
    assert len(ids) == len(PRESETS)


def test_equal_networks_have_equal_ids() -> None:
    base = get_preset("mcan-small")
    # group flags without groups, WS without a group-wise layer: the same dense network
    assert base.replace(group_attention=True, weight_sharing=True).arch_id == base.arch_id
    # an identity sharing pattern is no sharing; relabelled patterns are the same network
    assert base.replace(layer_sharing="(0,1,2,3,4,5)").arch_id == base.arch_id
    a = base.replace(layer_sharing={"encoder": "(1x3,0x3)"})
    b = base.replace(layer_sharing={"encoder": "0,0,0,1,1,1"})
    assert a.arch_id == b.arch_id
    # the string form applies to every stack
    c = base.replace(layer_sharing="(0x3,1x3)")
    d = base.replace(layer_sharing={"encoder": "(0x3,1x3)", "decoder": "(0x3,1x3)"})
    assert c.arch_id == d.arch_id != a.arch_id
    # different networks differ
    assert base.replace(groups=2, group_ffn=True).arch_id != base.arch_id


def test_arch_id_is_stable_across_processes() -> None:
    # A hard-coded id would be a tautology; instead check it is a pure function of the content.
    config = get_preset("lw-1x")
    again = ArchConfig.from_dict(dict(reversed(list(config.to_dict().items()))))
    assert again.arch_id == config.arch_id and len(config.arch_id) == 12


def test_patterns() -> None:
    assert parse_pattern("(0x3,1x3)") == (0, 0, 0, 1, 1, 1)
    assert parse_pattern("0,0,1,1,2,2") == (0, 0, 1, 1, 2, 2)
    assert parse_pattern("(0x6)") == (0,) * 6
    assert parse_pattern([0, 1, 2, 2, 1, 0]) == (0, 1, 2, 2, 1, 0)
    assert canonical_pattern((2, 2, 0, 1)) == (0, 0, 1, 2)
    assert format_pattern((0, 0, 0, 1, 1, 1)) == "(0x3,1x3)"
    assert parse_pattern(format_pattern((0, 1, 2, 2, 1, 0))) == (0, 1, 2, 2, 1, 0)
    with pytest.raises(ConfigError, match="'a'"):
        parse_pattern("(0,a)")


def test_sharing_pattern_per_stack() -> None:
    config = get_preset("acort-base")
    assert config.sharing_pattern("encoder") == (0, 0, 0, 1, 1, 1)
    assert config.sharing_pattern("decoder") == (0, 0, 0, 1, 1, 1)
    mixed = config.replace(layer_sharing={"decoder": "(0x6)"})
    assert mixed.sharing_pattern("encoder") == tuple(range(6))
    assert mixed.sharing_pattern("decoder") == (0,) * 6


def test_overrides_are_yaml() -> None:
    assert parse_overrides(["groups=4", "weight_sharing=true", "radix_base=null",
                            'layer_sharing={encoder: "(0x6)"}']) == {
        "groups": 4, "weight_sharing": True, "radix_base": None,
        "layer_sharing": {"encoder": "(0x6)"},
    }
    config = load_arch("mcan-small", ["groups=4", "qk_multiplier=3"])
    assert (config.groups, config.qk_multiplier) == (4, 3)


def test_missing_keys_come_from_the_family_base() -> None:
    config = ArchConfig.from_dict({"family": "ort", "radix_base": 100})
    assert config.d_model == 512 and config.encoder_layers == 6 and config.radix_base == 100


def test_config_file(tmp_path) -> None:
    path = tmp_path / "arch.yaml"
    path.write_text("family: vit\nd_model: 96\nheads: 3\nd_ff: 384\nencoder_layers: 4\n")
    config = load_arch(str(path))
    assert (config.family, config.d_model, config.encoder_layers, config.patch_size) == (
        "vit", 96, 4, 16)


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"groups": 3}, "d_model % groups == 0"),
        ({"heads": 7}, "d_model % heads == 0"),
        ({"groups": 0}, "groups >= 1"),
        ({"groups": "2"}, "must be an integer"),
        ({"groups": True}, "must be an integer"),
        ({"weight_sharing": "yes"}, "must be true or false"),
        ({"attention_sharing": "vq"}, "attention_sharing"),
        ({"attention_sharing": "qv"}, "self-attention only"),
        ({"attention_sharing": "kv", "qk_multiplier": 2}, "qk_multiplier=1"),
        ({"radix_base": 768}, "text decoder"),
        ({"layer_sharing": "(0x5)"}, "has length 5"),
        ({"layer_sharing": {"vision": "(0x6)"}}, "'vision'"),
        ({"depths": [2, 2]}, "does not apply"),
        ({"colour": "red"}, "Unknown architecture key 'colour'"),
        ({"d_model": 8192 * 2}, "`d_model <= 8192` must hold, but got d_model=16384"),
        ({"encoder_layers": 10**7}, "`encoder_layers <= 128`"),
        ({"layer_sharing": "(0x1000000000)"}, "expands to 1000000000 depths"),
        ({"layer_sharing": "(" + "0," * 2000 + "0)"}, "at most 1024 characters"),
    ],
)
def test_invalid_configs_name_value_and_rule(changes: dict, fragment: str) -> None:
    with pytest.raises(ConfigError, match=None) as info:
        ArchConfig.from_dict({**PRESETS["mcan-small"], **changes})
    assert fragment in str(info.value)


def test_limits_leave_room_past_every_paper_scale_model() -> None:
    from nas.config import LIMITS

    # the widest: Swin-L's last stage (192 x 8 = 1536 wide, 48 heads); the deepest: ViT-H (32)
    assert get_preset("swin-tiny").replace(d_model=192, d_ff=768, heads=6,
                                           depths=[2, 2, 18, 2]).stacks == {}
    assert get_preset("deit-base").replace(encoder_layers=32, d_model=1280, heads=16,
                                           d_ff=5120).encoder_layers == 32
    assert ArchConfig.from_dict({**PRESETS["mcan-small"], "layer_sharing": {"encoder": "(0x128)"},
                                 "encoder_layers": LIMITS["encoder_layers"]}).stacks == {
        "encoder": 128, "decoder": 6}


def test_swin_rejects_layer_sharing_and_radix() -> None:
    with pytest.raises(ConfigError, match="swin"):
        get_preset("swin-tiny").replace(layer_sharing="(0x2)")
    with pytest.raises(ConfigError, match="text decoder"):
        get_preset("deit-tiny").replace(radix_base=100)
