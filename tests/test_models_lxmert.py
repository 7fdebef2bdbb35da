"""The LXMERT family: hand-counted cost, cost against the real network, structure."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
from modelcheck import check_against_materialised, random_knobs, random_pattern
from torch.utils.flop_counter import FlopCounterMode

from nas.config import ArchConfig
from nas.cost import estimate_cost, model_cost
from nas.layers import Attention
from nas.models.lxmert import LXMERT, CrossLayer, build
from nas.presets import PRESETS, get_preset
from nas.tasks import TaskGeometry, get_geometry

LXMERT_PRESETS = sorted(n for n, p in PRESETS.items() if p["family"] == "lxmert")
TINY = TaskGeometry("tiny-vqa", "vqa", 7, question_tokens=6, question_vocab=40, regions=5,
                    region_dim=12)



# --------------------------------------------------------------------------- hand-counted cost
def _linear(d_in: int, d_out: int, k: int = 1, *, shared: bool = False) -> int:
    """Parameters of a (group-wise) linear layer with bias."""
    per_group = (d_in // k) * (d_out // k) + d_out // k
    return per_group if shared or k == 1 else k * per_group


def _backbone_params(d: int, d_ff: int, *, k: int = 1, ws: bool = False, language: int = 9,
                     vision: int = 5, cross: int = 5) -> int:
    """LXMERT backbone parameters from its structure (G-MHA and G-FFN with k groups)."""
    norm = 2 * d
    attention_block = 3 * _linear(d, d, k, shared=ws) + _linear(d, d) + norm  # Q, K, V, dense, LN
    ffn_block = _linear(d, d_ff) + _linear(d_ff, d, k, shared=ws) + norm  # intermediate, output
    single = attention_block + ffn_block  # BERT layer / object-relationship layer
    cross_layer = 3 * attention_block + 2 * ffn_block  # ONE cross block, two self, two FFN
    return (language + vision) * single + cross * cross_layer


def _attention(d: int, l_q: int, l_k: int) -> int:
    return 2 * l_q * d * d + 2 * l_k * d * d + 2 * l_q * l_k * d


def _dead_vision_madds(d: int, d_ff: int, lq: int = 14, lr: int = 100) -> int:
    """The last cross layer's vision half: cross-attention vision -> language, vision
    self-attention and vision FFN."""
    return _attention(d, lr, lq) + _attention(d, lr, lr) + 2 * lr * d * d_ff


def _backbone_madds(d: int, d_ff: int, lq: int = 14, lr: int = 100, *,
                    vision_output: bool = False) -> int:
    """Dense LXMERT backbone MAdds by knobs.md's rules; the last cross layer's vision half only
    with ``vision_output`` (as LXMERT's released encoder computes it)."""

    def attention(l_q: int, l_k: int) -> int:
        return _attention(d, l_q, l_k)

    def ffn(tokens: int) -> int:
        return 2 * tokens * d * d_ff

    cross = attention(lq, lr) + attention(lr, lq) + attention(lq, lq) + attention(lr, lr)
    full = 9 * (attention(lq, lq) + ffn(lq)) + 5 * (attention(lr, lr) + ffn(lr)) + 5 * (
        cross + ffn(lq) + ffn(lr)
    )
    return full if vision_output else full - _dead_vision_madds(d, d_ff, lq, lr)


def test_dense_backbone_params_follow_the_structure() -> None:
    backbone = estimate_cost(get_preset("lxmert")).parts["backbone"]
    assert backbone.params == _backbone_params(768, 3072) == 181_928_448
    # weights only: everything but biases (4 attention + 2 FFN per block kind) and LNs
    biases_and_norms = (9 + 5) * (4 * 768 + 2 * 768 + 3072 + 768 + 2 * 768) + 5 * (
        3 * (4 * 768 + 2 * 768) + 2 * (3072 + 768 + 2 * 768)
    )
    assert backbone.params_matrix == backbone.params - biases_and_norms


def test_lw_lxmert_1x_backbone_params_follow_the_structure() -> None:
    backbone = estimate_cost(get_preset("lw-lxmert-1x")).parts["backbone"]
    assert backbone.params == _backbone_params(768, 3072, k=2, ws=True) == 100_932_480


def test_dense_backbone_madds_follow_hand_written_accounting() -> None:
    cost = estimate_cost(get_preset("lxmert"))
    assert cost.task == "vqa2"
    assert cost.parts["backbone"].madds == _backbone_madds(768, 3072)
    assert cost.params == sum(p.params for p in cost.parts.values())
    assert cost.madds == sum(p.madds for p in cost.parts.values())


def test_the_released_encoders_count_adds_the_dead_vision_half() -> None:
    """Run as LXMERT's released encoder runs (``vision_output``), the backbone does the whole
    last cross layer: 8.5% more of the preset's MAdds, the same parameters."""
    config, vqa = get_preset("lxmert"), get_geometry("vqa2")
    skipped = estimate_cost(config)
    released = model_cost(build(config, vqa, device="meta", vision_output=True), config, vqa)
    assert released.parts["backbone"].madds == _backbone_madds(768, 3072, vision_output=True) \
        == 9_989_271_552
    assert released.madds - skipped.madds == _dead_vision_madds(768, 3072) == 859_779_072
    assert round(100 * (released.madds - skipped.madds) / released.madds, 1) == 8.5
    assert released.params == skipped.params
    assert released.parts["backbone"].params == skipped.parts["backbone"].params
    for part in ("embedding", "head"):
        assert released.parts[part] == skipped.parts[part]


def test_outside_parts_follow_lxmert() -> None:
    d, vqa = 768, get_geometry("vqa2")
    parts = estimate_cost(get_preset("lxmert")).parts
    embeddings = (vqa.question_vocab + 512 + 2) * d + 2 * d
    visual = (vqa.region_dim * d + d) + 2 * d + (4 * d + d) + 2 * d
    assert parts["embedding"].params == embeddings + visual
    pooler = d * d + d
    classifier = (d * 2 * d + 2 * d) + 2 * 2 * d + (2 * d * vqa.num_outputs + vqa.num_outputs)
    assert parts["head"].params == pooler + classifier


@pytest.mark.parametrize("stack", ["language", "vision", "cross"])
def test_full_sharing_of_a_stack_keeps_one_layer_of_params(stack: str) -> None:
    base = get_preset("lxmert")
    depth = base.stacks[stack]
    shared = base.replace(layer_sharing={stack: f"(0x{depth})"})
    layers = {"language": 9, "vision": 5, "cross": 5}
    layers[stack] = 1
    base_cost, shared_cost = estimate_cost(base), estimate_cost(shared)
    expected = _backbone_params(768, 3072, language=layers["language"],
                                vision=layers["vision"], cross=layers["cross"])
    assert shared_cost.parts["backbone"].params == expected
    assert shared_cost.parts["backbone"].madds == base_cost.parts["backbone"].madds


# --------------------------------------------------------------------------- structure
def _small(**changes: Any) -> ArchConfig:
    return get_preset("lxmert").replace(
        d_model=48, d_ff=96, heads=12, language_layers=2, vision_layers=2, cross_layers=2,
        **changes,
    )


def _cross_layer(model: LXMERT, index: int) -> CrossLayer:
    layer = model.cross.stack.layers[index]
    assert isinstance(layer, CrossLayer)
    return layer


def test_cross_attention_is_one_block_called_in_both_directions() -> None:
    torch.manual_seed(0)
    model = build(_small(), TINY).eval()
    layer = _cross_layer(model, 0)
    assert sum(isinstance(m, Attention) for m in layer.modules()) == 3
    calls: list[tuple[int, int]] = []
    layer.cross.register_forward_hook(
        lambda m, args, out: calls.append((args[0].shape[1], args[1].shape[1]))
    )
    with torch.no_grad():
        model(**model.example_inputs(2))
    # language (6 tokens) attends to vision (5 regions), then vision attends to language
    assert calls == [(6, 5), (5, 6)]


def test_cross_layer_uses_its_inputs_in_both_directions() -> None:
    torch.manual_seed(0)
    model = build(_small(), TINY, dropout=0.0).eval()
    layer = _cross_layer(model, 0)
    lang, visn = torch.randn(2, 6, 48), torch.randn(2, 5, 48)
    with torch.no_grad():
        lang_att, visn_att = layer.cross(lang, visn), layer.cross(visn, lang)
        expected = (
            layer.lang_output(layer.lang_self(lang_att)),
            layer.visn_output(layer.visn_self(visn_att)),
        )
        got = layer(lang, visn)
    assert all(torch.allclose(g, e) for g, e in zip(got, expected, strict=True))


def test_padding_tokens_and_zero_regions_do_not_change_the_answer() -> None:
    torch.manual_seed(0)
    model = build(_small(groups=2, group_attention=True, group_ffn=True, weight_sharing=True),
                  TINY).eval()
    inputs = model.example_inputs(3)
    q, r, b = inputs["question"], inputs["regions"], inputs["boxes"]
    padded_q = torch.cat([q, torch.zeros(3, 4, dtype=q.dtype)], dim=1)
    padded_r = torch.cat([r, torch.zeros(3, 2, TINY.region_dim)], dim=1)
    padded_b = torch.cat([b, torch.rand(3, 2, 4)], dim=1)  # padding regions may carry boxes
    with torch.no_grad():
        out = model(q, r, b)
        assert torch.allclose(model(padded_q, padded_r, padded_b), out, atol=1e-5)
        extra_q = torch.cat([q, torch.full((3, 1), 3, dtype=q.dtype)], dim=1)
        assert not torch.allclose(model(extra_q, r, b), out, atol=1e-5)


@pytest.mark.parametrize("changes", [
    {}, {"cross_layers": 1}, {"layer_sharing": {"cross": "(0x2)"}},
    {"layer_sharing": {"cross": "0,1"}, "groups": 2, "group_attention": True},
])
def test_skipping_the_dead_vision_half_leaves_the_answer_exactly_unchanged(
        changes: dict[str, Any]) -> None:
    """The forward pass skips the last cross layer's vision half; the released encoder's full
    computation (``vision_output=True``) gives the very same logits with the same weights, and
    the skipped modules do not run at the last depth."""
    config = _small().replace(**changes)
    torch.manual_seed(0)
    skipping = build(config, TINY).eval()
    released = build(config, TINY, vision_output=True).eval()
    released.load_state_dict(skipping.state_dict())
    last = _cross_layer(skipping, config.sharing_pattern("cross")[-1])
    calls: list[str] = []
    for name in ("cross", "visn_self", "visn_output"):
        getattr(last, name).register_forward_hook(
            lambda m, args, out, name=name: calls.append(name))
    inputs = skipping.example_inputs(3)
    with torch.no_grad():
        got, expected = skipping(**inputs), released(**inputs)
    assert torch.equal(got, expected)
    depth = config.stacks["cross"]
    runs = config.sharing_pattern("cross").count(config.sharing_pattern("cross")[-1])
    # each earlier depth the module runs at: both directions and the vision half; the last:
    # language attends to vision only
    assert calls.count("cross") == 2 * runs - 1 and calls.count("visn_self") == runs - 1
    assert calls.count("visn_output") == runs - 1 and depth >= runs


def test_the_counter_sees_the_dead_half_only_in_the_released_computation() -> None:
    """PyTorch's own counter on the real network: the released computation does exactly the
    dead vision half's MAdds more (hand count), and the skipping one what ``nas cost`` says."""
    config = _small()
    torch.manual_seed(0)
    counts = []
    for vision_output in (False, True):
        model = build(config, TINY, vision_output=vision_output).eval()
        counter = FlopCounterMode(display=False)
        with torch.no_grad(), counter:
            model(**model.example_inputs(1))
        counts.append(int(counter.get_total_flops()) // 2)
    assert counts[0] == estimate_cost(config, TINY).madds
    assert counts[1] - counts[0] == _dead_vision_madds(48, 96, lq=6, lr=5)


def test_only_the_vision_half_of_the_last_cross_layer_is_unused() -> None:
    model = build(_small(), TINY, device="meta")
    unused = model.unused_parameter_names()
    assert unused and all(n.startswith("cross.stack.layers.1.visn_") for n in unused)
    last = _cross_layer(model, 1)
    assert len(unused) == len(list(last.visn_self.parameters())) + len(
        list(last.visn_output.parameters())
    )
    # shared with an earlier depth, the module's vision half is live
    assert build(_small(layer_sharing={"cross": "(0x2)"}), TINY,
                 device="meta").unused_parameter_names() == []


def test_dropout_is_a_build_keyword() -> None:
    model = build(_small(), TINY, dropout=0.3)
    rates = {
        name: m.p for name, m in model.named_modules()
        if isinstance(m, torch.nn.Dropout) and not name.endswith(("proj_drop", "ffn.drop"))
    }
    assert len(rates) > 10 and set(rates.values()) == {0.3}


def test_build_rejects_other_families() -> None:
    with pytest.raises(ValueError, match="lxmert"):
        build(get_preset("mcan-small"), TINY)


# --------------------------------------------------------------------------- cost vs real network
@pytest.mark.parametrize("name", LXMERT_PRESETS)
def test_presets_at_reduced_width_match_materialised(name: str) -> None:
    config = get_preset(name).replace(d_model=48, d_ff=96, heads=12)
    model = build(config, get_geometry("vqa2"), device="meta")
    assert isinstance(model, LXMERT) and len(model.language.stack) == 9
    check_against_materialised(config, "vqa2")


def _random_configs(count: int, seed: int = 7) -> list[ArchConfig]:
    rng = random.Random(seed)
    configs = []
    for _ in range(count):
        depths = {"language": rng.randint(1, 3), "vision": rng.randint(1, 2),
                  "cross": rng.randint(1, 2)}
        configs.append(ArchConfig.from_dict({
            "family": "lxmert", "d_model": 32, "d_ff": 64, "heads": rng.choice((4, 8)),
            "language_layers": depths["language"], "vision_layers": depths["vision"],
            "cross_layers": depths["cross"],
            "layer_sharing": {name: random_pattern(rng, n) for name, n in depths.items()},
            **random_knobs(rng),
        }))
    return configs


@pytest.mark.parametrize("config", _random_configs(50), ids=lambda c: c.arch_id)
def test_random_knobs_match_materialised(config: ArchConfig) -> None:
    check_against_materialised(config, TINY)
