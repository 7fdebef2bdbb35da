"""The MCAN-ED family: published figures, cost against the real network, knob equivalences."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
from modelcheck import check_against_materialised, random_knobs, random_pattern
from torch.utils.flop_counter import FlopCounterMode

from nas.config import ArchConfig
from nas.cost import estimate_cost
from nas.models import create_model
from nas.models.mcan import MCAN, GuidedSelfAttentionLayer, build
from nas.presets import PRESETS, get_preset
from nas.tasks import TaskGeometry, get_geometry

MCAN_PRESETS = sorted(n for n, p in PRESETS.items() if p["family"] == "mcan")
TINY = TaskGeometry("tiny-vqa", "vqa", 7, question_tokens=6, question_vocab=40, regions=5,
                    region_dim=12)



def _check(config: ArchConfig, task: TaskGeometry | str | None = None) -> None:
    check_against_materialised(config, task)


def _meta_model(config: ArchConfig) -> MCAN:
    model = create_model(config, device="meta")
    assert isinstance(model, MCAN)
    return model


# --------------------------------------------------------------------------- published figures
def test_mcan_small_backbone_matches_published_figures() -> None:
    cost = estimate_cost(get_preset("mcan-small"))
    assert cost.task == "vqa2"
    assert cost.parts["backbone"].params == 44_138_496
    assert cost.parts["backbone"].madds == 2_581_536_768
    assert set(cost.parts) == {"backbone", "embedding", "head"}
    assert cost.params == sum(p.params for p in cost.parts.values())
    assert cost.madds == sum(p.madds for p in cost.parts.values())


def test_lw_1x_backbone_matches_published_figures() -> None:
    backbone = estimate_cost(get_preset("lw-1x")).parts["backbone"]
    assert backbone.params == 24_067_584
    assert backbone.params_matrix == 23_986_176  # the paper's 24.0M counts weights only


def test_outside_parts_follow_mcan() -> None:
    d, vqa = 512, get_geometry("vqa2")
    parts = estimate_cost(get_preset("mcan-small")).parts
    lstm = 4 * d * (300 + d) + 2 * 4 * d
    assert parts["embedding"].params == vqa.question_vocab * 300 + lstm + 2048 * d + d
    pool = (d * d + d) + (d + 1) + (d * 2 * d + 2 * d)
    assert parts["head"].params == 2 * pool + 2 * 2 * d + 2 * d * vqa.num_outputs + vqa.num_outputs


# --------------------------------------------------------------------------- hand-written MAdds
def _backbone_madds(
    d: int, d_ff: int, *, enc: int = 6, dec: int = 6, lq: int = 14, lr: int = 100, ka: int = 1,
    kf: int = 1, km: int = 1, ki: int = 1, n: int = 1, kv: bool = False,
) -> int:
    """MCAN-ED backbone MAdds, counted by knobs.md's rules (enc/dec are executed depths)."""

    def attention(l_q: int, l_k: int) -> int:
        q = l_q * d * (n * d) // ka  # group-wise linear: in*out/k per token
        k = l_k * d * (n * d) // ka
        v = 0 if kv else l_k * d * d // ka  # kv sharing: the value is the projected key
        o = l_q * d * d // km
        return q + k + v + o + l_q * l_k * (n * d) + l_q * l_k * d

    def ffn(tokens: int) -> int:
        return tokens * d * d_ff // ki + tokens * d_ff * d // kf

    sa = attention(lq, lq) + ffn(lq)
    sga = attention(lr, lr) + attention(lr, lq) + ffn(lr)
    return enc * sa + dec * sga


@pytest.mark.parametrize(
    ("changes", "formula"),
    [
        ({}, {}),
        ({"groups": 2, "group_attention": True, "group_ffn": True, "weight_sharing": True},
         {"ka": 2, "kf": 2}),
        ({"qk_multiplier": 3}, {"n": 3}),
        ({"attention_sharing": "kv"}, {"kv": True}),
        ({"layer_sharing": "(0x3,1x3)"}, {}),
        ({"layer_sharing": {"encoder": "(0x6)"}, "groups": 4, "group_merge": True,
          "group_intermediate": True, "qk_multiplier": 2}, {"km": 4, "ki": 4, "n": 2}),
        ({"encoder_layers": 2, "decoder_layers": 4, "layer_sharing": {"decoder": "0,1,1,0"},
          "groups": 4, "group_attention": True, "group_ffn": True}, {"enc": 2, "dec": 4,
                                                                   "ka": 4, "kf": 4}),
    ],
)
def test_backbone_madds_follow_hand_written_accounting(
    changes: dict[str, Any], formula: dict[str, Any]
) -> None:
    config = get_preset("mcan-small").replace(**changes)
    expected = _backbone_madds(512, 2048, **formula)
    assert estimate_cost(config).parts["backbone"].madds == expected


def test_hand_written_accounting_gives_the_published_figure() -> None:
    assert _backbone_madds(512, 2048) == 2_581_536_768


# --------------------------------------------------------------------------- layer sharing
def _flops_by_module(model: MCAN) -> dict[str, int]:
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(**model.example_inputs())
    return {k: int(sum(v.values())) // 2 for k, v in counter.get_flop_counts().items()}


def test_full_encoder_sharing_counts_one_layer_of_params_and_six_of_madds() -> None:
    base = get_preset("mcan-small")
    shared_config = base.replace(layer_sharing={"encoder": "(0x6)"})
    unshared, shared = _meta_model(base), _meta_model(shared_config)
    assert len(shared.encoder.stack.layers) == 1 and len(shared.encoder.stack) == 6

    sa_params = sum(p.numel() for p in unshared.encoder.stack.layers[0].parameters())
    decoder_params = sum(p.numel() for p in unshared.decoder.parameters())
    base_cost, shared_cost = estimate_cost(base), estimate_cost(shared_config)
    assert base_cost.parts["backbone"].params == 6 * sa_params + decoder_params
    assert shared_cost.parts["backbone"].params == sa_params + decoder_params
    assert shared_cost.parts["backbone"].madds == base_cost.parts["backbone"].madds

    base_flops, shared_flops = _flops_by_module(unshared), _flops_by_module(shared)
    one_sa = base_flops["MCAN.encoder.stack.layers.0"]
    assert base_flops["MCAN.encoder"] == shared_flops["MCAN.encoder"] == 6 * one_sa
    # the single shared module is charged once per executed depth
    assert shared_flops["MCAN.encoder.stack.layers.0"] == 6 * one_sa


def test_shared_encoder_runs_its_one_layer_at_every_depth() -> None:
    config = get_preset("mcan-small").replace(
        d_model=32, d_ff=64, heads=4, layer_sharing={"encoder": "(0x6)"}
    )
    torch.manual_seed(0)
    model = build(config, TINY, dropout=0.0).eval()
    x = torch.randn(2, 6, 32)
    mask = torch.ones(2, 1, 1, 6, dtype=torch.bool)
    layer = model.encoder.stack.layers[0]
    expected = x
    with torch.no_grad():
        for _ in range(6):
            expected = layer(expected, mask)
        assert torch.allclose(model.encoder(x, mask), expected)


# --------------------------------------------------------------------------- structure
def test_guided_attention_reads_the_final_encoder_output() -> None:
    config = get_preset("mcan-small").replace(d_model=32, d_ff=64, heads=4, encoder_layers=3,
                                              decoder_layers=2)
    torch.manual_seed(0)
    model = build(config, TINY).eval()
    seen: dict[str, Any] = {"memory": []}
    model.encoder.register_forward_hook(lambda m, a, out: seen.__setitem__("encoded", out))
    for _, layer in model.decoder.stack.executed():
        assert isinstance(layer, GuidedSelfAttentionLayer)
        layer.guided_attn.register_forward_hook(
            lambda m, a, out: seen["memory"].append(a[1])
        )
    with torch.no_grad():
        model(**model.example_inputs(2))
    assert len(seen["memory"]) == 2
    assert all(m is seen["encoded"] for m in seen["memory"])


def test_padding_tokens_and_zero_regions_do_not_change_the_answer() -> None:
    config = get_preset("lw-1x").replace(d_model=32, d_ff=64, heads=4)
    torch.manual_seed(0)
    model = build(config, TINY).eval()
    inputs = model.example_inputs(3)
    question, regions = inputs["question"], inputs["regions"]
    padded_q = torch.cat([question, torch.zeros(3, 4, dtype=question.dtype)], dim=1)
    padded_r = torch.cat([regions, torch.zeros(3, 2, TINY.region_dim)], dim=1)
    with torch.no_grad():
        out = model(question, regions)
        assert torch.allclose(model(padded_q, padded_r), out, atol=1e-5)
        # a real (non-zero) extra region does change it: the check above can fail
        extra = torch.cat([regions, torch.randn(3, 1, TINY.region_dim)], dim=1)
        assert not torch.allclose(model(question, extra), out, atol=1e-5)


def test_dropout_is_a_build_keyword() -> None:
    model = build(get_preset("mcan-small").replace(d_model=32, d_ff=64, heads=4), TINY,
                  dropout=0.25)
    rates = {
        name: m.p for name, m in model.named_modules()
        if isinstance(m, torch.nn.Dropout) and not name.endswith("proj_drop")  # W_O's own: 0
    }
    assert len(rates) > 10 and set(rates.values()) == {0.25}


def test_build_rejects_other_families() -> None:
    with pytest.raises(ValueError, match="mcan"):
        build(get_preset("lxmert"), TINY)


# --------------------------------------------------------------------------- cost vs real network
@pytest.mark.parametrize("name", MCAN_PRESETS)
def test_presets_at_reduced_width_match_materialised(name: str) -> None:
    _check(get_preset(name).replace(d_model=64, d_ff=128, heads=8), "vqa2")


@pytest.mark.slow
def test_full_size_mcan_small_matches_materialised() -> None:
    _check(get_preset("mcan-small"))


def _random_configs(count: int, seed: int = 20240611) -> list[ArchConfig]:
    rng = random.Random(seed)
    configs = []
    for _ in range(count):
        enc, dec = rng.randint(1, 3), rng.randint(1, 3)
        configs.append(ArchConfig.from_dict({
            "family": "mcan", "d_model": 32, "d_ff": 64, "heads": rng.choice((4, 8)),
            "encoder_layers": enc, "decoder_layers": dec,
            "layer_sharing": {"encoder": random_pattern(rng, enc),
                              "decoder": random_pattern(rng, dec)},
            **random_knobs(rng),
        }))
    return configs


@pytest.mark.parametrize("config", _random_configs(50), ids=lambda c: c.arch_id)
def test_random_knobs_match_materialised(config: ArchConfig) -> None:
    _check(config, TINY)
